package plane

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Bounds of one trial: long enough for client-go's defaults on a loaded
// machine, short enough that a stuck plane does not stall the matrix.
const (
	resumeTimeout = 90 * time.Second
	settle        = 3 * time.Second
	// judgedBefore is how long before the fault the window starts;
	// alignQuiet (> judgedBefore + the analysis' 3 s gap) separates an
	// alignment's handoff from the fault's.
	judgedBefore = 2 * time.Second
	alignQuiet   = 6 * time.Second
)

// Run runs scenario s once in mode (Use first) and judges it.
func (r *Runner) Run(ctx context.Context, s Spec, mode Mode, repeat int) report.Result {
	res := report.Result{ID: s.ID, Name: s.Name, Mode: mode.Name, Repeat: repeat}
	fail := func(f string, a ...any) { res.Problems = append(res.Problems, fmt.Sprintf(f, a...)) }
	mode.Balanced = s.Balanced
	if have := r.P.Lab.EtcdLayout(); s.Layout != "" && s.Layout != have {
		fail("setup: scenario %d needs the %s etcd layout; this lab has %s (kha-lab down, then kha-lab up --plane real --etcd-layout %s)", s.ID, s.Layout, have, s.Layout)
		return res
	}
	if err := r.Use(ctx, mode); err != nil {
		fail("setup: %v", err)
		return res
	}
	nodes, err := r.P.Lab.Masters()
	if err != nil {
		fail("%v", err)
		return res
	}
	sched, cm, err := r.Leaders(ctx, mode)
	if err != nil {
		fail("leaders: %v", err)
		return res
	}
	if mode.LeaderElect && sched != cm {
		if sched, cm, err = r.align(ctx, mode, sched, cm); err != nil {
			fail("align the leases: %v", err)
			return res
		}
	}
	res.Leader, res.CMLeader = sched, cm
	t := &Trial{R: r, Mode: mode, Leader: sched, Nodes: nodes}
	if s.Prepare != nil {
		if err := s.Prepare(ctx, t); err != nil {
			fail("prepare: %v", err)
			return res
		}
	}
	if note := r.quiet(ctx, quietTimeout); note != "" {
		t.Notef("%s", note)
	}
	r.Prober.ResetExtra()
	running := r.componentRuns(ctx, nodes)
	// The judge at etcd reads etcd's history from here (commits.go).
	rec, err := r.P.recordCommits(ctx)
	if err != nil {
		fail("etcd judge: %v", err)
	}
	res.FaultAt = time.Now()
	heal, err := s.Inject(ctx, t)
	if err != nil {
		fail("fault: %v", err)
	}
	// A fault takes time to put in place (a rack cut is ~20 routes): a pod
	// created meanwhile may still be bound by the old leader (seen: 16 ms
	// after the fault's start). Only pods created after it is complete
	// count as "new"; times are still measured from its start.
	res.FaultDone = time.Now()
	r.P.Log.Info("plane: fault injected", "scenario", s.ID, "mode", mode.Name, "leader", sched)
	resumed := r.waitResumed(ctx, res.FaultAt)
	if !resumed {
		fail("service did not resume within %s of the fault", resumeTimeout)
	}
	time.Sleep(settle)
	if s.Hold != nil {
		if err := s.Hold(ctx, t); err != nil {
			fail("while the fault lasted: %v", err)
		}
	}
	if heal != nil {
		res.HealAt = time.Now()
		if err := heal(ctx); err != nil {
			fail("heal: %v", err)
		}
	}
	if nl, err := r.Steady(ctx, mode, 3*time.Minute); err != nil {
		fail("after the heal: %v", err)
	} else {
		res.NewLeader = nl
	}
	time.Sleep(settle)
	if s.After != nil {
		s.After(ctx, t, &res)
	}
	end := time.Now()
	res.Exits = componentExits(running, r.componentRuns(ctx, nodes))
	r.judge(ctx, &res, end)
	r.judgeFence(s, t, &res, end)
	r.judgeCommits(ctx, rec, &res, end)
	res.Notes = append(res.Notes, t.Notes...)
	res.Notes = append(res.Notes, r.hostFlakes(ctx, res.FaultAt, end)...)
	verdict(&res, mode)
	return res
}

// align moves the scheduler's lease to the controller-manager's leader, so
// that one fault on one master measures both: the scheduler releases its
// lease when stopped (the controller-manager does not, which is why it is
// the one left in place).
func (r *Runner) align(ctx context.Context, mode Mode, sched, cm string) (string, string, error) {
	n, err := r.P.Lab.Master(sched)
	if err != nil {
		return "", "", err
	}
	if err := stop(ctx, n, kube.Scheduler); err != nil {
		return "", "", err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = waitFor(wctx, "the scheduler's lease on "+cm, func() error {
		h, err := r.leaseHolder(wctx, kube.Scheduler, mode)
		if err == nil && h != cm {
			err = fmt.Errorf("held by %s", h)
		}
		return err
	})
	if _, serr := n.Systemctl(ctx, "start", kube.Scheduler); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return "", "", err
	}
	// The move is a handoff of its own: keep it out of the judged window
	// (seen: the scheduler moved m2 -> m1 at the align and m1 -> m2 at the
	// fault 1 s later, judged as one interval of both).
	time.Sleep(alignQuiet)
	return r.Leaders(ctx, mode)
}

// waitResumed waits until a pod created after the fault is bound and a
// ReplicaSet pod deleted after the fault was replaced.
func (r *Runner) waitResumed(ctx context.Context, fault time.Time) bool {
	deadline := time.Now().Add(resumeTimeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s := r.Prober.Snapshot()
		bound, replaced := false, false
		for _, p := range s.Pods {
			if p.Created.After(fault) && !p.Bound.IsZero() {
				bound = true
			}
		}
		for _, d := range s.Deletions {
			if d.At.After(fault) && !d.Replaced.IsZero() {
				replaced = true
			}
		}
		if bound && replaced {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return false
}

// AuditLogs are both apiservers' audit logs, by master.
func (p *Plane) AuditLogs() map[string]string {
	out := map[string]string{}
	for _, m := range lab.MasterNames {
		out[m] = filepath.Join(p.Dir("apiserver-"+m), "audit.log")
	}
	return out
}

// MasterIPs maps the masters' addresses to their names (audit attribution).
func (p *Plane) MasterIPs() map[string]string {
	out := map[string]string{}
	for _, m := range lab.MasterNames {
		out[p.Lab.Topo.Addr(m).String()] = m
	}
	return out
}

// judge fills the figures: bind times from the audit log (exact), creation
// and replacement times from the prober, overlap from the audit log.
func (r *Runner) judge(ctx context.Context, res *report.Result, end time.Time) {
	evs, err := audit.ReadFiles(r.P.AuditLogs())
	if err != nil {
		res.Problems = append(res.Problems, err.Error())
		return
	}
	// From just before the fault: the steady state before it was checked
	// (Steady), and a mode switch earlier hands units over on purpose.
	from := res.FaultAt.Add(-judgedBefore)
	rep := audit.Analyze(evs, audit.Options{From: from, To: end, Masters: r.P.MasterIPs()})
	for _, o := range rep.Overlaps {
		res.Overlaps = append(res.Overlaps, o.String())
	}
	res.DoubleBind = len(rep.DoubleBinds)
	res.Writes = fmt.Sprint(rep.Writes)
	bound := bindTimes(evs, r.P.MasterIPs())
	snap := r.Prober.Snapshot()
	res.ExtraRS = snap.MaxExtra
	first, longest := firstBindAfter(snap.Pods, bound, res.FaultDone, from, end)
	if !first.Time.IsZero() {
		res.SchedMS = ms(first.Time.Sub(res.FaultAt))
	}
	res.UnboundMS = ms(longest)
	res.Handoff = handoffs(evs, r.P.MasterIPs(), res.Leader, from, res.FaultAt, res.HealAt, end)
	res.CMMS = ms(longestUnreplaced(snap.Deletions, from, end))
	if res.CMLeader != res.Leader {
		// Leader election placed the controller-manager's lease on the
		// other master: the fault did not touch it, its figure says
		// nothing about a failover.
		res.CMMS = 0
		res.Notes = append(res.Notes, "controller-manager led on "+res.CMLeader+", not on the faulted "+res.Leader+": no controller-manager figure")
	}
	if first.Master != "" && first.Master != res.Leader {
		if st, err := r.unitStart(ctx, first.Master, kube.Scheduler); err == nil && st.After(res.FaultAt) {
			if b := firstBindBy(evs, r.P.MasterIPs(), first.Master, st); !b.IsZero() {
				res.ColdMS = ms(b.Sub(st))
			}
		}
	}
}

type bind struct {
	Time   time.Time
	Master string
}

// bindTimes are the accepted bindings by pod name (the first).
func bindTimes(evs []audit.Event, ips map[string]string) map[string]bind {
	o := audit.Options{Masters: ips}
	out := map[string]bind{}
	for _, e := range evs {
		if e.Resource == "pods" && e.Subresource == "binding" && e.Verb == "create" && e.Accepted() {
			if _, ok := out[e.Name]; !ok && e.Namespace == probe.DefaultNamespace {
				out[e.Name] = bind{e.Completed, o.Master(e)}
			}
		}
	}
	return out
}

func firstBindBy(evs []audit.Event, ips map[string]string, m string, after time.Time) time.Time {
	o := audit.Options{Masters: ips}
	for _, e := range evs {
		if e.Resource == "pods" && e.Subresource == "binding" && e.Accepted() && o.Master(e) == m && e.Completed.After(after) {
			return e.Completed
		}
	}
	return time.Time{}
}

// firstBindAfter: the first binding of a pod created after the fault, and
// the longest any pod created in [from, end] stayed unbound (until end if
// never bound).
func firstBindAfter(pods []probe.Pod, bound map[string]bind, fault, from, end time.Time) (bind, time.Duration) {
	var first bind
	var longest time.Duration
	for _, p := range pods {
		if p.Created.Before(from) || p.Created.After(end) {
			continue
		}
		b, ok := bound[p.Name]
		at := b.Time
		if !ok {
			at = p.Bound // seen bound (audit not flushed?) or zero
		}
		if at.IsZero() || at.After(end) {
			at = end
		}
		if d := at.Sub(p.Created); d > longest {
			longest = d
		}
		if ok && p.Created.After(fault) && (first.Time.IsZero() || b.Time.Before(first.Time)) {
			first = b
		}
	}
	return first, longest
}

func longestUnreplaced(ds []probe.Deletion, from, end time.Time) time.Duration {
	var longest time.Duration
	for _, d := range ds {
		if d.At.Before(from) || d.At.After(end) {
			continue
		}
		at := d.Replaced
		if at.IsZero() {
			at = end
		}
		if x := at.Sub(d.At); x > longest {
			longest = x
		}
	}
	return longest
}

// unitStart is the unit's last start on master m (microseconds, UTC).
func (r *Runner) unitStart(ctx context.Context, m, unit string) (time.Time, error) {
	n, err := r.P.Lab.Master(m)
	if err != nil {
		return time.Time{}, err
	}
	out, err := n.Exec(ctx, "systemctl", "show", "--timestamp=us+utc", "-p", "ExecMainStartTimestamp", "--value", unit)
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse("Mon 2006-01-02 15:04:05.000000 UTC", strings.TrimSpace(string(out)))
}

// hostFlakes notes systemd's failed unit starts on this VM ("status=219/CGROUP":
// the cgroup vanished under nspawn's systemd, not the component's doing), which
// make a promotion fail and cost the cooldown.
func (r *Runner) hostFlakes(ctx context.Context, from, to time.Time) []string {
	var out []string
	for _, m := range lab.MasterNames {
		n, err := r.P.Lab.Master(m)
		if err != nil {
			continue
		}
		j, _ := n.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "--since", from.Local().Format("2006-01-02 15:04:05"),
			"--until", to.Add(time.Second).Local().Format("2006-01-02 15:04:05"))
		for _, l := range strings.Split(string(j), "\n") {
			if strings.Contains(l, "status=219/CGROUP") {
				out = append(out, m+": "+strings.TrimSpace(l))
			}
		}
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// handoffs finds, per component, the faulted leader's last accepted write
// since from (the fault may stop it at once: a cut apiserver accepts
// nothing) and the other master's first after the fault (see report.ResourceHandoff).
func handoffs(evs []audit.Event, ips map[string]string, leader string, from, fault, heal, end time.Time) map[string]report.ResourceHandoff {
	o := audit.Options{Masters: ips}
	out := map[string]report.ResourceHandoff{}
	for _, role := range []string{audit.Scheduler, audit.ControllerManager} {
		var first time.Time
		for _, e := range evs {
			if e.Role() == role && e.Write() && e.Accepted() && o.Master(e) != leader && e.Completed.After(fault) && e.Completed.Before(end) &&
				(first.IsZero() || e.Completed.Before(first)) {
				first = e.Completed
			}
		}
		until := first
		if until.IsZero() {
			until = heal
		}
		if until.IsZero() {
			until = end
		}
		var last time.Time
		for _, e := range evs {
			if e.Role() == role && e.Write() && e.Accepted() && o.Master(e) == leader && e.Completed.After(from) && e.Completed.Before(until) &&
				e.Completed.After(last) {
				last = e.Completed
			}
		}
		out[role] = report.ResourceHandoff{LastOldMS: msAfter(last, fault), FirstOtherMS: msAfter(first, fault)}
	}
	return out
}

func msAfter(t, from time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	d := ms(t.Sub(from))
	return &d
}

// componentRuns is, per "master/unit", when each component's main process
// started, for the units active now (componentExits compares two).
func (r *Runner) componentRuns(ctx context.Context, nodes map[string]*master.Node) map[string]string {
	out := map[string]string{}
	for name, n := range nodes {
		for _, u := range []string{audit.Scheduler, audit.ControllerManager} {
			b, err := n.Exec(ctx, "systemctl", "show", "--timestamp=us+utc", "-p", "ActiveState,ExecMainPID,ExecMainStartTimestamp", u)
			if err != nil {
				continue
			}
			v := string(b)
			if strings.Contains(v, "ActiveState=active") && !strings.Contains(v, "ExecMainPID=0\n") {
				out[name+"/"+u] = strings.Join(strings.Fields(v), " ")
			}
		}
	}
	return out
}

// componentExits names the components that ran before the fault and whose
// process did not run through the trial: stopped, or started again (a
// leader-elected component that lost its Lease exits, and systemd starts
// it again; a supervisor's failover stops the old leader's units).
func componentExits(before, after map[string]string) []string {
	var out []string
	for k, b := range before {
		a, ok := after[k]
		switch {
		case !ok:
			out = append(out, k+" stopped")
		case a != b:
			out = append(out, k+" restarted")
		}
	}
	slices.Sort(out)
	return out
}
