package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

// Scenario is one scenario of the lab, on either plane: a row of a
// scenario table (All, Operator, Issues: the stand-in lab) or a real-plane
// scenario registering itself (registerReal), each scenario's code in its
// own file. Tables() is the one registry: `kha-lab run` and `list`, the
// soak, the CI subset and the documents read it.
type Scenario struct {
	ID       int
	Name     string
	Fault    string
	Expected string
	// run is a stand-in lab scenario's body: fault, checks and heal.
	run func(ctx context.Context, r *Run) error
	// In are the runs besides its own table's that take the scenario.
	In Set
	// Real is a real-plane scenario's fault, heal and hooks, run by
	// plane.Runner in the modes `kha-lab run --modes` names (the lab up with
	// --plane real); nil for the stand-in lab's.
	Real *plane.Spec
}

// OnRealPlane says which lab runs the scenario: the real control plane
// (`kha-lab up --plane real`) or the stand-ins.
func (s Scenario) OnRealPlane() bool { return s.Real != nil }

// Set names runs a scenario can belong to besides its own table's.
type Set uint8

// Alone: only its own table's runs (`kha-lab run all|operator|issues`).
const Alone Set = 0

const (
	// CI: `make test` runs it (TestCISubset): short, and together a
	// partition, a crash, a freeze, an operator's mistake, a planned
	// handoff and every operator command.
	CI Set = 1 << iota
	// Soak: `kha-lab soak` draws from it.
	Soak
)

// Tables are every scenario, in `kha-lab list` order: the stand-in lab's
// tables, then the real plane's by ID.
func Tables() []Scenario { return slices.Concat(All, Operator, Issues, RealPlane()) }

// IDsIn are the IDs of the scenarios in set, in table order.
func IDsIn(set Set) []int {
	var ids []int
	for _, s := range Tables() {
		if s.In&set != 0 {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// CISubset are the scenarios `make test` runs.
func CISubset() []int { return IDsIn(CI) }

// SoakSet is what a soak draws from: every matrix scenario but 10, whose
// whole point is an operator removing the safety net (it makes an overlap by
// hand).
func SoakSet() []int { return IDsIn(Soak) }

// Run is the state of one scenario execution.
type Run struct {
	*Env
	Res             *report.Result
	Leader, Standby string
	LeaderToken     int64

	undo    []func(context.Context) error
	excuse  func(witness.Overlap) bool
	started time.Time
}

// Failf records an unmet expectation.
func (r *Run) Failf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.Log.Error("scenario: "+msg, "scenario", r.Res.ID)
	r.Res.Problems = append(r.Res.Problems, msg)
}

// Notef records an observation.
func (r *Run) Notef(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.Log.Info("scenario: "+msg, "scenario", r.Res.ID)
	r.Res.Notes = append(r.Res.Notes, msg)
}

// Metric records a duration in milliseconds.
func (r *Run) Metric(name string, d time.Duration) {
	r.Res.Metrics[name] = float64(d.Microseconds()) / 1000
}

// Mark adds a timeline entry.
func (r *Run) Mark(at time.Time, node, label string) {
	r.Res.Timeline = append(r.Res.Timeline, report.Mark{At: at, Node: node, Label: label})
}

// Undo registers a clean-up step, run (in reverse order) after the scenario
// whatever happened.
func (r *Run) Undo(f func(context.Context) error) { r.undo = append(r.undo, f) }

// Fault stamps the fault instant and injects it.
func (r *Run) Fault(what string, inject func() error) (time.Time, error) {
	t := time.Now()
	r.Res.FaultAt = t
	r.Mark(t, "", "fault: "+what)
	r.Log.Info("scenario: inject fault", "scenario", r.Res.ID, "fault", what)
	if err := inject(); err != nil {
		return t, fmt.Errorf("inject %s: %w", what, err)
	}
	return t, nil
}

// Heal removes every partition now.
func (r *Run) Heal(ctx context.Context) error {
	r.Res.HealAt = time.Now()
	r.Mark(r.Res.HealAt, "", "heal")
	return r.Lab.Topo.HealAll(ctx)
}

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// steadyTimeout bounds the wait for the steady state before and after a
// scenario: a fenced supervisor restarts after 1 s, a demoted one sits out
// its cooldown, a partitioned one rejoins after its record lease.
func (e *Env) steadyTimeout() time.Duration {
	return 3*e.Profile.TTL + e.Profile.Cooldown + 60*time.Second
}

// failoverTimeout bounds the wait for a new leader with running units.
func (e *Env) failoverTimeout() time.Duration { return 4*e.Profile.TTL + 30*time.Second }

// Execute runs one scenario: steady state, fault, checks, restore, overlap
// check over the whole span.
func (e *Env) Execute(ctx context.Context, sc Scenario, repeat int) report.Result {
	res := report.Result{ID: sc.ID, Name: sc.Name, Repeat: repeat,
		StandIn: report.StandIn{Fault: sc.Fault, Expected: sc.Expected, Metrics: map[string]float64{}}}
	r := &Run{Env: e, Res: &res, started: time.Now()}
	res.Start = r.started
	e.Log.Info("scenario: start", "scenario", sc.ID, "name", sc.Name, "repeat", repeat)

	leader, standby, err := e.Steady(ctx, e.steadyTimeout())
	if err != nil {
		// One attempt to repair what an earlier scenario left.
		_ = e.Restore(ctx)
		leader, standby, err = e.Steady(ctx, e.steadyTimeout())
	}
	if err != nil {
		r.Failf("no steady state before the fault: %v", err)
	} else {
		r.Leader, r.Standby = leader, standby
		r.LeaderToken = e.Obs.Now().Token
		res.Leader = leader
		r.Mark(time.Now(), leader, "steady: "+leader+" leads")
		if err := sc.run(ctx, r); err != nil {
			r.Failf("%v", err)
		}
	}
	for i := len(r.undo) - 1; i >= 0; i-- {
		if err := r.undo[i](ctx); err != nil {
			r.Failf("clean-up: %v", err)
		}
	}
	if err := e.Restore(ctx); err != nil {
		r.Failf("restore: %v", err)
	}
	// A clean-up step may have reloaded systemd on a node, which stalls its
	// bus (and so its supervisor's view of the units) for a second or two
	// here; let that pass before judging the steady state the next
	// scenario starts from.
	_ = Sleep(ctx, 2*time.Second)
	if _, _, err := e.Steady(ctx, e.steadyTimeout()); err != nil {
		r.Failf("no steady state after the scenario: %v", err)
	}
	res.End = time.Now()
	r.checkOverlaps()
	r.recordAlive()
	res.Pass = len(res.Problems) == 0
	slices.SortFunc(res.Timeline, func(a, b report.Mark) int { return a.At.Compare(b.At) })
	e.Log.Info("scenario: done", "scenario", sc.ID, "pass", res.Pass, "metrics_ms", res.Metrics, "overlap_ms", res.OverlapMS)
	return res
}

// checkOverlaps looks at every overlap that touches the scenario's span
// (the checker reads the logs afresh up to now).
func (r *Run) checkOverlaps() {
	time.Sleep(2 * witness.Period) // let the last lines land
	_ = r.W.Refresh()
	for _, o := range witness.OverlapsBetween(r.W.Overlaps(), r.Res.Start, r.Res.End.Add(time.Second)) {
		if r.excuse != nil && r.excuse(o) {
			r.Res.Excused = append(r.Res.Excused, o.String())
			continue
		}
		r.Res.OverlapMS += float64(o.Duration().Microseconds()) / 1000
		r.Res.Overlaps = append(r.Res.Overlaps, o.String())
	}
	if len(r.Res.Overlaps) > 0 {
		r.Failf("OVERLAP: %d interval(s), %.3f ms in total", len(r.Res.Overlaps), r.Res.OverlapMS)
	}
}

func (r *Run) recordAlive() {
	ins := r.W.Instances()
	for _, n := range lab.MasterNames {
		var mine []witness.Instance
		for _, in := range ins {
			if in.Node == n {
				mine = append(mine, in)
			}
		}
		for _, u := range Units() {
			for _, iv := range witness.Coverage(mine, u, r.Res.Start.Add(-3*time.Second), r.Res.End) {
				r.Res.Alive = append(r.Res.Alive, report.Span{Node: n, Unit: u, From: iv.From, To: iv.To})
			}
		}
	}
}

// Failover waits until a node in allowed holds a NEW election key (token
// differs from the one at the start) and runs every unit, then records the
// standard metrics against fault. It returns the new leader.
func (r *Run) Failover(ctx context.Context, fault time.Time, allowed ...string) (string, error) {
	var newLeader string
	var won time.Time
	err := WaitFor(ctx, r.failoverTimeout(), "failover", func() (bool, string) {
		snap := r.Obs.Now()
		t := r.refreshNow()
		if snap.Leader == "" || snap.Token == r.LeaderToken {
			return false, fmt.Sprintf("leader %q token %d", snap.Leader, snap.Token)
		}
		if !slices.Contains(allowed, snap.Leader) {
			return false, fmt.Sprintf("unexpected leader %s", snap.Leader)
		}
		for _, u := range Units() {
			if _, ok := r.W.FirstStart(snap.Leader, u, fault); !ok || !r.Running(snap.Leader, t) {
				return false, fmt.Sprintf("%s leads, units not all beating yet", snap.Leader)
			}
		}
		newLeader = snap.Leader
		return true, ""
	})
	if err != nil {
		return "", err
	}
	r.Res.NewLeader = newLeader
	for _, ev := range r.Obs.LeaderChanges(fault, time.Now()) {
		if *ev.Leader == newLeader && ev.Token != r.LeaderToken {
			won = ev.At
			break
		}
	}
	r.measure(fault, r.Leader, newLeader, won)
	return newLeader, nil
}

// measure fills the standard metrics for a takeover from old to new.
func (r *Run) measure(fault time.Time, old, new string, won time.Time) {
	_ = r.W.Refresh()
	var oldLast, newFirst time.Time
	ref := won
	if ref.IsZero() {
		ref = time.Now()
	}
	for _, u := range Units() {
		// Every instance the old leader had started before the new one won
		// (and that still ran near the fault) counts with its LAST beat,
		// even one after the win: then the margin is negative and says so.
		// An instance the same node starts after winning again does not.
		for _, in := range r.W.InstancesBetween(old, u, fault.Add(-time.Second), ref) {
			if in.First.Before(ref) && in.Last.After(oldLast) {
				oldLast = in.Last
			}
		}
		if t, ok := r.W.FirstStart(new, u, fault); ok && t.After(newFirst) {
			newFirst = t
		}
	}
	if !oldLast.IsZero() {
		r.Metric(report.MStopped, oldLast.Sub(fault))
		r.Mark(oldLast, old, "last heartbeat of "+old+"'s units")
	}
	if !won.IsZero() {
		r.Metric(report.MWon, won.Sub(fault))
		r.Mark(won, new, new+" wins the election key")
		if !oldLast.IsZero() {
			r.Metric(report.MMargin, won.Sub(oldLast))
		}
	}
	if !newFirst.IsZero() {
		r.Metric(report.MFailover, newFirst.Sub(fault))
		r.Mark(newFirst, new, "every unit beating on "+new)
		var worst time.Duration
		ins := r.W.Instances()
		for _, u := range Units() {
			g := witness.LongestGap(ins, u, fault, newFirst.Add(time.Second))
			worst = max(worst, g.To.Sub(g.From))
		}
		r.Metric(report.MGap, worst)
	}
}

// NoChange checks that nothing moved in [from, to): same election key, the
// leader's unit instances still the ones running at from, and nothing ever
// ran on the standby.
func (r *Run) NoChange(from, to time.Time) {
	_ = r.W.Refresh()
	if ch := r.Obs.LeaderChanges(from, to); len(ch) > 0 {
		r.Failf("leadership changed %d time(s) (first: %q)", len(ch), *ch[0].Leader)
	}
	for _, u := range Units() {
		a, ok1 := r.W.InstanceAt(r.Leader, u, from)
		b, ok2 := r.W.InstanceAt(r.Leader, u, to)
		if !ok1 || !ok2 || a.Key != b.Key {
			r.Failf("%s on the leader %s did not run through (at fault: %v, at end: %v)", u, r.Leader, ok1, ok2)
		}
		if in := r.W.InstancesBetween(r.Standby, u, from, to); len(in) > 0 {
			r.Failf("%s ran on the standby %s", u, r.Standby)
		}
	}
}
