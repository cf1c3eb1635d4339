// Package audit judges the real control plane at the resource: it reads
// both apiservers' audit logs (ResponseComplete events) and reports every
// interval in which writes from both masters' kube-scheduler, or both
// masters' kube-controller-manager, were accepted, and the harm such
// overlap causes (a second binding of an already bound pod: 409 on
// pods/binding). What the units or their supervisors believe does not
// enter: only what the apiservers accepted.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
)

// Roles a write is attributed to.
const (
	Scheduler         = "kube-scheduler"
	ControllerManager = "kube-controller-manager"
)

// Event is one completed request as an apiserver audited it.
type Event struct {
	Server string // whose audit log (master name)
	// User is the effective user: the impersonated one when the request
	// impersonated (the API gate forwards as the component), Impersonator
	// then the credential that sent it.
	User         string
	Impersonator string
	// Token is the effective user's kha.io/fencing-token extra (nil: none).
	Token []string
	// DryRun: a dryRun=All request (the publisher's confirmation probes),
	// admitted or not, never stored.
	DryRun      bool
	SourceIP    string
	Verb        string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Code        int
	Message     string // responseStatus.message
	Received    time.Time
	Completed   time.Time
	// RV is the resourceVersion of the object answered (0: none: the
	// audit policy logged no response body, or the answer was a Status).
	// An accepted write's answer carries the revision etcd committed it
	// at, which pairs it with its write exactly (lab/kube/commits).
	RV int64
}

// Role is the component that wrote, or "" for anyone else.
func (e Event) Role() string {
	switch {
	case e.User == "system:kube-scheduler":
		return Scheduler
	case e.User == "system:kube-controller-manager",
		strings.HasPrefix(e.User, "system:serviceaccount:kube-system:"):
		// --use-service-account-credentials: each controller writes as its
		// own service account in kube-system.
		return ControllerManager
	}
	return ""
}

// Write reports whether the request could change state.
func (e Event) Write() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// Accepted reports a 2xx answer.
func (e Event) Accepted() bool { return e.Code >= 200 && e.Code < 300 }

// DoubleBind reports a binding refused because the pod was already bound
// ("pod X is already assigned to node Y"). Other 409s on pods/binding are
// not: an apiserver that lost etcd answers a binding with 409 "rpc error:
// code = Unavailable" (seen on the cut master), which binds nothing twice.
func (e Event) DoubleBind() bool {
	return e.Verb == "create" && e.Resource == "pods" && e.Subresource == "binding" && e.Code == 409 &&
		strings.Contains(e.Message, "already assigned")
}

// Object names the object ("pods/binding probe/p-1").
func (e Event) Object() string {
	r := e.Resource
	if e.Subresource != "" {
		r += "/" + e.Subresource
	}
	return r + " " + e.Namespace + "/" + e.Name
}

// raw is the part of audit.k8s.io/v1 Event the analysis reads.
type raw struct {
	Stage            string   `json:"stage"`
	Verb             string   `json:"verb"`
	SourceIPs        []string `json:"sourceIPs"`
	User             rawUser  `json:"user"`
	ImpersonatedUser *rawUser `json:"impersonatedUser"`
	RequestURI       string   `json:"requestURI"`
	ObjectRef        *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	Received       time.Time `json:"requestReceivedTimestamp"`
	Stage2         time.Time `json:"stageTimestamp"`
	ResponseObject *struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"responseObject"`
}

type rawUser struct {
	Username string              `json:"username"`
	Extra    map[string][]string `json:"extra"`
}

// Parse reads one apiserver's JSON-lines audit log. Only ResponseComplete
// events count (a request is judged by its answer). A line that is not an
// audit event is an error naming the line: a log the lab cannot read must
// not pass as a log without overlap. The one exception is a last line
// without its newline: the apiserver is writing it as the log is read
// (its backend writes whole lines, each ending in a newline), and it is
// left for the next read.
func Parse(r io.Reader, server string) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	split := bufio.ScanLines
	ended := true
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := split(data, atEOF)
		if tok != nil {
			ended = adv > len(tok) // a newline was consumed with it
		}
		return adv, tok, err
	})
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if !ended {
			break // the last line, still being written
		}
		if line == "" {
			continue
		}
		var ev raw
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return nil, fmt.Errorf("audit log of %s, line %d: %w", server, n, err)
		}
		if ev.Stage == "" || ev.Stage2.IsZero() {
			return nil, fmt.Errorf("audit log of %s, line %d: not an audit event (no stage or stageTimestamp)", server, n)
		}
		if ev.Stage != "ResponseComplete" {
			continue
		}
		e := Event{Server: server, User: ev.User.Username, Verb: ev.Verb, Received: ev.Received, Completed: ev.Stage2,
			Token: ev.User.Extra[gate.TokenExtra], DryRun: strings.Contains(ev.RequestURI, "dryRun=All")}
		if iu := ev.ImpersonatedUser; iu != nil {
			e.User, e.Impersonator, e.Token = iu.Username, ev.User.Username, iu.Extra[gate.TokenExtra]
		}
		if len(ev.SourceIPs) > 0 {
			e.SourceIP = ev.SourceIPs[0]
		}
		if ev.ObjectRef != nil {
			e.Resource, e.Subresource, e.Namespace, e.Name = ev.ObjectRef.Resource, ev.ObjectRef.Subresource, ev.ObjectRef.Namespace, ev.ObjectRef.Name
		}
		if ev.ResponseStatus != nil {
			e.Code, e.Message = ev.ResponseStatus.Code, ev.ResponseStatus.Message
		}
		if ro := ev.ResponseObject; ro != nil && ro.Kind != "Status" && ro.Metadata.ResourceVersion != "" {
			rv, err := strconv.ParseInt(ro.Metadata.ResourceVersion, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("audit log of %s, line %d: responseObject's resourceVersion %q: %w", server, n, ro.Metadata.ResourceVersion, err)
			}
			e.RV = rv
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log of %s: %w", server, err)
	}
	return out, nil
}

// ReadFiles reads each master's audit log (master -> path) into one
// stream ordered by completion time.
func ReadFiles(logs map[string]string) ([]Event, error) {
	var all []Event
	for m, p := range logs {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		evs, err := Parse(f, m)
		f.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Completed.Before(all[j].Completed) })
	return all, nil
}

// Options of an analysis.
type Options struct {
	From, To time.Time // the window judged (zero: everything)
	// Gap: a master's writes less than Gap apart form one interval of
	// activity. It must exceed the quiet time of an active component
	// under the prober's load (a pod every 200 ms keeps the scheduler
	// binding); 3 s if 0.
	Gap time.Duration
	// Masters maps source IPs to masters. A write is the master's whose
	// address sent it; unknown sources fall back to the receiving
	// apiserver (the components talk to their own node's).
	Masters map[string]string
	// WriteTime, when set, is when an accepted write took effect at the
	// resource; nil: when its answer completed, the latest it can have.
	// The etcd judge passes the request's arrival for the writes it found
	// committed (any committed after another master's first write although
	// they arrived before it are its late commits): a request a paused
	// apiserver had committed before the pause completes only at the
	// thaw, after the other master's writes, without overlapping them.
	WriteTime func(e *Event) time.Time
}

// Overlap is an interval in which one role's writes from two masters were
// both accepted.
type Overlap struct {
	Role     string
	From, To time.Time
	Masters  []string
	Writes   map[string]int // accepted writes of each master inside the interval
}

func (o Overlap) String() string {
	return fmt.Sprintf("%s written from %s at once for %s (%s .. %s, writes %v)", o.Role, strings.Join(o.Masters, " and "),
		o.To.Sub(o.From).Round(time.Millisecond), o.From.Format("15:04:05.000"), o.To.Format("15:04:05.000"), o.Writes)
}

// Report is the verdict at the resource.
type Report struct {
	Overlaps []Overlap
	// DoubleBinds are refused bindings of pods already bound (409 on
	// pods/binding): a second scheduler acted on a pod the first had
	// placed.
	DoubleBinds []Event
	// Writes counts accepted writes per role per master.
	Writes map[string]map[string]int
}

// OK is the pass condition: no overlap and no double binding.
func (r Report) OK() bool { return len(r.Overlaps) == 0 && len(r.DoubleBinds) == 0 }

// Master attributes e.
func (o Options) Master(e Event) string {
	if m, ok := o.Masters[e.SourceIP]; ok {
		return m
	}
	return e.Server
}

// Analyze judges events (any order).
func Analyze(events []Event, o Options) Report {
	if o.Gap == 0 {
		o.Gap = 3 * time.Second
	}
	rep := Report{Writes: map[string]map[string]int{}}
	times := map[string]map[string][]time.Time{} // role -> master -> accepted write times
	for i := range events {
		e := &events[i]
		if (!o.From.IsZero() && e.Completed.Before(o.From)) || (!o.To.IsZero() && e.Completed.After(o.To)) {
			continue
		}
		if e.DoubleBind() {
			rep.DoubleBinds = append(rep.DoubleBinds, *e)
		}
		role := e.Role()
		if role == "" || !e.Write() || !e.Accepted() || e.DryRun {
			continue
		}
		m := o.Master(*e)
		if times[role] == nil {
			times[role] = map[string][]time.Time{}
			rep.Writes[role] = map[string]int{}
		}
		at := e.Completed
		if o.WriteTime != nil {
			at = o.WriteTime(e)
		}
		times[role][m] = append(times[role][m], at)
		rep.Writes[role][m]++
	}
	roles := make([]string, 0, len(times))
	for r := range times {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	for _, role := range roles {
		rep.Overlaps = append(rep.Overlaps, overlaps(role, times[role], o.Gap)...)
	}
	return rep
}

type span struct{ from, to time.Time }

// intervals merges sorted times less than gap apart.
func intervals(ts []time.Time, gap time.Duration) []span {
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	var out []span
	for _, t := range ts {
		if n := len(out); n > 0 && t.Sub(out[n-1].to) < gap {
			out[n-1].to = t
			continue
		}
		out = append(out, span{t, t})
	}
	return out
}

func overlaps(role string, byMaster map[string][]time.Time, gap time.Duration) []Overlap {
	masters := make([]string, 0, len(byMaster))
	for m := range byMaster {
		masters = append(masters, m)
	}
	slices.Sort(masters)
	var out []Overlap
	for i := range masters {
		for j := i + 1; j < len(masters); j++ {
			a, b := masters[i], masters[j]
			for _, x := range intervals(byMaster[a], gap) {
				for _, y := range intervals(byMaster[b], gap) {
					from, to := later(x.from, y.from), earlier(x.to, y.to)
					if from.After(to) {
						continue
					}
					out = append(out, Overlap{Role: role, From: from, To: to, Masters: []string{a, b},
						Writes: map[string]int{a: count(byMaster[a], from, to), b: count(byMaster[b], from, to)}})
				}
			}
		}
	}
	return out
}

func count(ts []time.Time, from, to time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
