package commits

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// Options of a judgement.
type Options struct {
	// Masters maps source IPs to masters (audit.Options.Masters).
	Masters map[string]string
	// Hosts maps the masters' host names to the masters, for writes with
	// no audit entry whose object names its writer's host.
	Hosts map[string]string
	// From and To bound the audit judge's overlap (audit.Analyze); the
	// commits are judged over the whole recording.
	From, To time.Time
}

// Commit is one committed write of a managed component.
type Commit struct {
	Write  Write
	Object Object
	Role   string
	// Master is the writer's master: the matched request's (Options.Master),
	// else the host the object names, else "" (unknown).
	Master string
	// Token is the fencing token the matched request carried (0: none).
	Token int64
	// Request is the audit entry of the request that made the write (nil:
	// none found); Request.Accepted() false makes the write a ghost.
	Request *audit.Event
}

// Ghost reports a write etcd committed that no accepted request answered.
func (c Commit) Ghost() bool { return c.Request == nil || !c.Request.Accepted() }

func (c Commit) String() string {
	who := c.Master
	if who == "" {
		who = "an unknown master"
	}
	s := fmt.Sprintf("rev %d %s %s %s by %s of %s", c.Write.Rev, c.Object.Kind, c.Object.Resource, c.Object.Path(), c.Role, who)
	if c.Token != 0 {
		s += " (token " + strconv.FormatInt(c.Token, 10) + ")"
	}
	switch r := c.Request; {
	case r == nil:
		s += ", no audit entry"
	case !r.Accepted():
		s += fmt.Sprintf(", audited %d %q at %s", r.Code, r.Message, r.Completed.Format("15:04:05.000"))
	default:
		s += ", received " + r.Received.Format("15:04:05.000")
	}
	return s
}

// Late is a write of a term committed after the next term's first write.
type Late struct {
	Commit
	Next Commit // the next term's first committed write
}

func (l Late) String() string {
	return l.Commit.String() + "; after the next term's first write, " + l.Next.String()
}

// Report is the verdict at etcd.
type Report struct {
	FromRev, ToRev int64
	Commits        []Commit // the managed components' writes, by revision
	Late           []Late
	Ghosts         []Commit
	// Overlaps are the audit judge's (audit.Analyze over From..To), each
	// write found committed timed at its request's arrival
	// (resourceOverlaps); AuditOnly are those the audit log alone shows
	// (timed at the answers), not at the resource.
	Overlaps, AuditOnly []audit.Overlap
	// Problems: writes that could not be decoded (a history the judge
	// cannot read must not pass as one without late commits).
	Problems []string
}

// OK: no late commit and nothing unread. Ghost writes are reported, not
// failed: a write committed before the next term began harms nobody, the
// audit judge only miscounts it.
func (r Report) OK() bool { return len(r.Late) == 0 && len(r.Problems) == 0 }

func (r Report) String() string {
	return fmt.Sprintf("etcd revisions %d..%d: managed writes committed %d, late commits %d, ghost writes %d, audit overlaps %d",
		r.FromRev, r.ToRev, len(r.Commits), len(r.Late), len(r.Ghosts), len(r.Overlaps))
}

// Judge judges rec against the apiservers' audit events (all of them: a
// write in the recording may answer a request received before it began).
func Judge(rec Recording, evs []audit.Event, o Options) Report {
	rep := Report{FromRev: rec.FromRev, ToRev: rec.ToRev}
	writes := slices.Clone(rec.Writes)
	sort.SliceStable(writes, func(i, j int) bool { return writes[i].Rev < writes[j].Rev })
	var all []Commit
	for _, w := range writes {
		obj, err := Decode(rec.Prefix, w)
		if err != nil {
			rep.Problems = append(rep.Problems, err.Error())
			continue
		}
		all = append(all, Commit{Write: w, Object: obj})
	}
	match(all, evs)
	rep.Overlaps, rep.AuditOnly = resourceOverlaps(all, evs, o)
	ao := audit.Options{Masters: o.Masters}
	for _, c := range all {
		c.Role = c.Object.Role
		if c.Request != nil {
			c.Role = c.Request.Role()
			c.Master = ao.Master(*c.Request)
			c.Token = token(*c.Request)
		} else {
			c.Master = o.hostMaster(c.Object.Host)
		}
		if c.Role == "" {
			continue
		}
		rep.Commits = append(rep.Commits, c)
		if c.Ghost() {
			rep.Ghosts = append(rep.Ghosts, c)
		}
	}
	for _, role := range []string{audit.ControllerManager, audit.Scheduler} {
		rep.Late = append(rep.Late, late(rep.Commits, role)...)
	}
	sort.SliceStable(rep.Late, func(i, j int) bool { return rep.Late[i].Write.Rev < rep.Late[j].Write.Rev })
	return rep
}

// token is the fencing token a request carried as the gate's impersonated
// extra (0: none, or not exactly one).
func token(e audit.Event) int64 {
	if e.Impersonator == "" || len(e.Token) != 1 {
		return 0
	}
	t, err := strconv.ParseInt(e.Token[0], 10, 64)
	if err != nil {
		return 0
	}
	return t
}

// hostMaster is the master whose host name h is, or ends with after a "-"
// (an event's reporting instance: "default-scheduler-HOST"); "" if none.
func (o Options) hostMaster(h string) string {
	if h == "" {
		return ""
	}
	for name, m := range o.Hosts {
		if h == name || strings.HasSuffix(h, "-"+name) {
			return m
		}
	}
	return ""
}

// resourceOverlaps is the audit judge's overlap with every accepted write
// that etcd committed timed at its request's arrival instead of its
// answer: the commit lies between the two, and one committed after
// another master's first write although it arrived before it is a late
// commit (late), so the arrival loses nothing. It matters for a paused
// apiserver: what it had committed before the pause is answered, and
// audited, at the thaw. auditOnly are the audit log's own overlaps that
// this timing does not find.
func resourceOverlaps(all []Commit, evs []audit.Event, o Options) (overlaps, auditOnly []audit.Overlap) {
	committed := map[*audit.Event]bool{}
	for _, c := range all {
		if c.Request != nil {
			committed[c.Request] = true
		}
	}
	ao := audit.Options{From: o.From, To: o.To, Masters: o.Masters}
	byAnswer := audit.Analyze(evs, ao).Overlaps
	ao.WriteTime = func(e *audit.Event) time.Time {
		if committed[e] {
			return e.Received
		}
		return e.Completed
	}
	overlaps = audit.Analyze(evs, ao).Overlaps
	for _, b := range byAnswer {
		if !slices.ContainsFunc(overlaps, func(o audit.Overlap) bool {
			return o.Role == b.Role && b.From.Before(o.To.Add(time.Nanosecond)) && o.From.Before(b.To.Add(time.Nanosecond))
		}) {
			auditOnly = append(auditOnly, b)
		}
	}
	return overlaps, auditOnly
}
