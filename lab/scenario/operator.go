package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Operator are the operator scenarios (issue 5, and the package upgrade of
// issue 4): the same steady state, clean-up and overlap check as the
// failure matrix, driving kha-supervisor's operator commands inside the
// masters the way an operator would.
var Operator = []Scenario{
	{16, "handoff-latency", fmt.Sprintf("`kha-supervisor handoff --to OTHER --wait` in the leader, %d times back and forth", HandoffRounds),
		"every unit beating on the target within 500 ms plus the units' own start time", noted(handoffLatency), CI},
	{17, "freeze", "freeze, then the leader's rack cut from etcd for longer than the TTL; unfreeze",
		"the leader still fences; no promotion while frozen; the standby promotes on unfreeze", noted(freezeScenario), CI},
	{18, "ban-leader", "`kha-supervisor ban LEADER`, handoff attempts to it, unban",
		"the leader steps down, the other takes over; handoffs to the banned node refused", noted(banScenario), CI},
	{19, "drills", "drill handoff --expect-within 10s; drill failover --expect-within 30s; drill failover --expect-within 100ms",
		"pass; pass after the lease wait; the last fails with exit 7", noted(drills), CI},
	{20, "leader-endpoint", "/leader polled on both masters every 50 ms across a cut of the leader's rack from etcd",
		"exactly one 200 before and after, never two at once", noted(leaderEndpoint), CI},
	{21, "hooks-order", "on_promote/on_demote/on_fence hooks log to /lab/hooks; a handoff, then the leader's rack cut from etcd",
		"on_promote before the new units' first heartbeat, on_demote/on_fence after the old units' last; hook token = status token", noted(hooksOrder), CI},
	{22, "package-upgrade-remove", "dpkg -i of a higher version on the leader; dpkg -r on the leader after that; dpkg --purge",
		"clean handoffs, the upgraded node back as standby on the new version, guard refuses on it, purge removes /etc/kha-supervisor", noted(packageUpgrade), CI},
}

// noted wraps an operator scenario: afterwards it notes every failed
// promotion the observer saw during it. A node whose unit start failed (on
// this host systemd sometimes refuses a unit's cgroup right after the old
// one went: status 219/CGROUP) demotes and sits out its cooldown, and that
// time shows in the scenario's figures; the note says why.
func noted(run func(context.Context, *Run) error) func(context.Context, *Run) error {
	return func(ctx context.Context, r *Run) error {
		from := time.Now()
		err := run(ctx, r)
		seen := map[string]bool{}
		for _, ev := range r.Obs.Events(from, time.Now()) {
			if ev.Record == nil || !strings.Contains(ev.Record.Reason, "promotion failed") || seen[ev.Record.Incarnation+ev.Record.Reason] {
				continue
			}
			seen[ev.Record.Incarnation+ev.Record.Reason] = true
			n := fmt.Sprintf("%s%s at %s: %s; it sat out its cooldown (%s)", report.PromotionFailedNote, ev.Record.Node,
				ev.At.UTC().Format("15:04:05.000"), ev.Record.Reason, r.Profile.Cooldown)
			r.Notef("%s", n)
			r.Res.Figures.PromotionFailures = append(r.Res.Figures.PromotionFailures, n)
		}
		return err
	}
}

// promotionFailedSince reports whether the observer saw a member's
// promotion fail since t.
func (r *Run) promotionFailedSince(t time.Time) bool {
	for _, ev := range r.Obs.Events(t, time.Now()) {
		if ev.Record != nil && strings.Contains(ev.Record.Reason, "promotion failed") {
			return true
		}
	}
	return false
}

// OperatorIDs are the IDs of the operator scenarios (`kha-lab run operator`).
func OperatorIDs() []int {
	var ids []int
	for _, s := range Operator {
		ids = append(ids, s.ID)
	}
	return ids
}

// reportKind names a run's report: "operator" when it ran only operator
// scenarios (so that `kha-lab docs`, which reads matrix runs, never picks
// it up), "matrix" otherwise.
func reportKind(ids []int) string {
	for _, id := range ids {
		if !slices.Contains(OperatorIDs(), id) {
			return "matrix"
		}
	}
	if len(ids) == 0 {
		return "matrix"
	}
	return "operator"
}

// supervisorBinary is the packaged binary inside a master.
const supervisorBinary = layout.Binary

// kha runs `kha-supervisor ARGS...` inside node as an operator on that
// master would (the packaged binary, /etc/kha-supervisor/config.toml) and
// returns its combined output and exit code.
func (r *Run) kha(ctx context.Context, node string, args ...string) (string, int) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, code := r.Nodes[node].Run(cctx, append([]string{supervisorBinary}, args...)...)
	r.Log.Info("scenario: kha-supervisor", "scenario", r.Res.ID, "node", node, "args", args, "exit", code)
	return strings.TrimSpace(out), code
}

// resteady waits for the steady state and makes it the reference of what
// follows: who leads, who stands by, the leader's token.
func (r *Run) resteady(ctx context.Context) error {
	l, s, err := r.Steady(ctx, r.steadyTimeout())
	if err != nil {
		return err
	}
	r.Leader, r.Standby, r.LeaderToken = l, s, r.Obs.Now().Token
	return nil
}

// setMS records a metric already in milliseconds.
func (r *Run) setMS(name string, v float64) { r.Res.Metrics[name] = v }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// waitUnits waits until every unit of node has an instance that started
// after since and beats now; it returns when the last of them first beat.
func (r *Run) waitUnits(ctx context.Context, node string, since time.Time) (time.Time, error) {
	var all time.Time
	err := WaitFor(ctx, r.failoverTimeout(), "units beating on "+node, func() (bool, string) {
		t := r.refreshNow()
		all = time.Time{}
		for _, u := range Units() {
			first, ok := r.W.FirstStart(node, u, since)
			if !ok {
				return false, u + " not started on " + node
			}
			all = later(all, first)
		}
		return r.Running(node, t), "not every unit beating on " + node
	})
	return all, err
}

// lastBeats returns, per unit, the last heartbeat of node's instance that
// was alive at t (the run's reference instance, not a later one).
func (r *Run) lastBeats(node string, t time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, u := range Units() {
		if in, ok := r.W.InstanceAt(node, u, t); ok {
			out[u] = in.Last
		}
	}
	return out
}

// latest is the latest of ts (zero for none).
func latest(ts map[string]time.Time) time.Time {
	var best time.Time
	for _, t := range ts {
		best = later(best, t)
	}
	return best
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// unitTimes reads systemd's timestamp property prop (e.g.
// InactiveExitTimestamp) of every managed unit on node and returns those
// after since.
func (r *Run) unitTimes(ctx context.Context, node, prop string, since time.Time) ([]time.Time, error) {
	args := []string{"systemctl", "show", "--timestamp=us+utc", "-p", prop}
	for _, w := range lab.Witnesses {
		args = append(args, w.Service())
	}
	out, err := r.Nodes[node].Exec(ctx, args...)
	if err != nil {
		return nil, err
	}
	var ts []time.Time
	for _, line := range strings.Split(string(out), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), prop+"=")
		if !ok || v == "" {
			continue
		}
		t, err := time.Parse("Mon 2006-01-02 15:04:05.000000 MST", v)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %q: %w", node, prop, v, err)
		}
		if t.After(since) {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("%s: no managed unit's %s after %s", node, prop, since.Format("15:04:05.000"))
	}
	return ts, nil
}

// startJobsBegan is when systemd on node began the earliest start job of a
// managed unit after since (InactiveExitTimestamp: the guard ExecStartPre
// runs from there, then the process). What follows it until the units beat
// is the units' own start time, not the supervisor's.
func (r *Run) startJobsBegan(ctx context.Context, node string, since time.Time) (time.Time, error) {
	ts, err := r.unitTimes(ctx, node, "InactiveExitTimestamp", since)
	if err != nil {
		return time.Time{}, err
	}
	return slices.MinFunc(ts, time.Time.Compare), nil
}

// unitsStopping is how long node's units took to stop after since: from
// systemd's first "Stopping" to its last "Stopped" line in the units'
// journal. Stops are ordered, so this is the units' own stop time, summed.
// (systemd's own timestamps are no use here: it unloads an inactive unit
// nothing refers to, and its timestamps go with it.)
func (r *Run) unitsStopping(ctx context.Context, node string, since time.Time) (time.Duration, error) {
	args := []string{"journalctl", "--no-pager", "-o", "short-unix", "--since", fmt.Sprintf("@%d", since.Unix())}
	for _, w := range lab.Witnesses {
		args = append(args, "-u", w.Service())
	}
	out, err := r.Nodes[node].Exec(ctx, args...)
	if err != nil {
		return 0, err
	}
	first, last := stopSpan(string(out), since)
	if first.IsZero() || last.IsZero() {
		return 0, fmt.Errorf("%s: no Stopping/Stopped of a managed unit in the journal after %s", node, since.Format("15:04:05.000"))
	}
	return last.Sub(first), nil
}

// stopSpan finds, in journalctl -o short-unix output, systemd's first
// "Stopping" and last "Stopped" line after since.
func stopSpan(journal string, since time.Time) (first, last time.Time) {
	for _, line := range strings.Split(journal, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[2], "systemd[") {
			continue
		}
		secs, micros, _ := strings.Cut(f[0], ".")
		sec, err1 := strconv.ParseInt(secs, 10, 64)
		us, err2 := strconv.ParseInt(micros, 10, 64)
		if err1 != nil || err2 != nil || len(micros) != 6 {
			continue
		}
		t := time.Unix(sec, us*1000)
		if !t.After(since) {
			continue
		}
		switch f[3] {
		case "Stopping":
			if first.IsZero() {
				first = t
			}
		case "Stopped":
			last = t
		}
	}
	return first, last
}

// clusterStatus runs `kha-supervisor status --json` in node.
func (r *Run) clusterStatus(ctx context.Context, node string) (supervisor.ClusterStatus, error) {
	var cs supervisor.ClusterStatus
	out, code := r.kha(ctx, node, "status", "--json")
	if code != 0 && code != 8 && code != 9 { // 8, 9: no active member, local member unhealthy; the JSON is complete
		return cs, fmt.Errorf("status --json on %s: exit %d: %s", node, code, out)
	}
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		return cs, fmt.Errorf("status --json on %s: %w", node, err)
	}
	return cs, nil
}

// --- 16: handoff latency ---------------------------------------------------

// HandoffRounds is how many handoffs scenario 16 measures per run.
const HandoffRounds = 5

var handoffTookRE = regexp.MustCompile(`target units active (\S+) after the request`)

// handoffSample is one measured handoff (milliseconds).
type handoffSample struct {
	total      float64 // command issued -> every target unit beating
	supervisor float64 // command issued -> the target's first start job began
	unitStop   float64 // the old leader's units' own stop time (within supervisor)
	unitStart  float64 // first start job -> every unit beating (the units' own start)
	dark       float64 // per unit, old last heartbeat -> new first heartbeat; the smallest
	reported   float64 // what `handoff --wait` printed (request written -> new leader active)
	demoting   float64 // command issued -> the observer saw the old leader's record say demoting
}

func handoffLatency(ctx context.Context, r *Run) error {
	var samples []handoffSample
	for i := 1; i <= HandoffRounds; i++ {
		if i > 1 {
			if err := r.resteady(ctx); err != nil {
				return fmt.Errorf("before handoff %d: %w", i, err)
			}
		}
		s, err := r.measureHandoff(ctx, i)
		if err != nil {
			return fmt.Errorf("handoff %d: %w", i, err)
		}
		samples = append(samples, s)
	}
	col := func(f func(handoffSample) float64) []float64 {
		var out []float64
		for _, s := range samples {
			if v := f(s); v >= 0 {
				out = append(out, v)
			}
		}
		return out
	}
	total := report.Summarize(col(func(s handoffSample) float64 { return s.total }))
	r.setMS("handoff", total.Median)
	r.setMS("handoff_min", total.Min)
	r.setMS("handoff_max", total.Max)
	sup := col(func(s handoffSample) float64 { return s.supervisor })
	r.setMS("supervisor", report.Summarize(sup).Median)
	r.setMS("unit_start", report.Summarize(col(func(s handoffSample) float64 { return s.unitStart })).Median)
	r.setMS("unit_stop", report.Summarize(col(func(s handoffSample) float64 { return s.unitStop })).Median)
	r.setMS("dark", report.Summarize(col(func(s handoffSample) float64 { return s.dark })).Median)
	if d := col(func(s handoffSample) float64 { return s.demoting }); len(d) > 0 {
		r.setMS("to_demoting", report.Summarize(d).Median)
	}
	if rep := col(func(s handoffSample) float64 { return s.reported }); len(rep) > 0 {
		r.setMS("cmd_reported", report.Summarize(rep).Median)
	}
	var parts []string
	met, metStop := 0, 0
	for _, s := range samples {
		r.Res.Figures.Handoffs = append(r.Res.Figures.Handoffs, report.Handoff{Total: s.total, Supervisor: s.supervisor, UnitStop: s.unitStop, UnitStart: s.unitStart})
		parts = append(parts, fmt.Sprintf("%.0f (%.0f + %.0f, old units' stop %.0f)", s.total, s.supervisor, s.unitStart, s.unitStop))
		if s.supervisor >= 0 && s.supervisor < 500 {
			met++
		}
		if s.supervisor >= 0 && s.unitStop >= 0 && s.supervisor-s.unitStop < 500 {
			metStop++
		}
	}
	r.Notef("%s%s", handoffNote, strings.Join(parts, ", "))
	r.Notef("target (500 ms plus the units' own start time) met in %d of %d handoffs; %d of %d when the old units' own stop time is not counted either", met, len(samples), metStop, len(samples))
	return nil
}

// handoffNote starts the note listing scenario 16's samples (for people;
// the documents read Figures.Handoffs).
const handoffNote = "handoffs, ms from the command to every target unit beating (supervisor part + units' own start, old units' stop within the supervisor part): "

// measureHandoff runs one handoff from the current leader to the standby.
func (r *Run) measureHandoff(ctx context.Context, i int) (handoffSample, error) {
	s := handoffSample{supervisor: -1, unitStop: -1, unitStart: -1, reported: -1, demoting: -1}
	from, to := r.Leader, r.Standby
	var out string
	var code int
	t0, err := r.Fault(fmt.Sprintf("handoff %d/%d: `kha-supervisor handoff --to %s --wait` on %s", i, HandoffRounds, to, from), func() error {
		out, code = r.kha(ctx, from, "handoff", "--to", to, "--wait", "--timeout", "30s")
		return nil
	})
	if err != nil {
		return s, err
	}
	if code != 0 {
		return s, fmt.Errorf("exit %d: %s", code, out)
	}
	newFirst, err := r.waitUnits(ctx, to, t0)
	if err != nil {
		return s, err
	}
	s.total = ms(newFirst.Sub(t0))
	r.Mark(newFirst, to, fmt.Sprintf("handoff %d: every unit beating on %s", i, to))
	old := r.lastBeats(from, t0)
	s.dark = -1
	for _, u := range Units() {
		first, ok1 := r.W.FirstStart(to, u, t0)
		last, ok2 := old[u]
		if !ok1 || !ok2 {
			r.Failf("handoff %d: %s: old last heartbeat or new first heartbeat missing", i, u)
			continue
		}
		d := ms(first.Sub(last))
		if d <= 0 {
			r.Failf("handoff %d: %s beat on %s %.1f ms before its last heartbeat on %s", i, u, to, -d, from)
		}
		if s.dark < 0 || d < s.dark {
			s.dark = d
		}
	}
	if began, err := r.startJobsBegan(ctx, to, t0); err != nil {
		r.Notef("handoff %d: start jobs not measured: %v", i, err)
	} else {
		s.supervisor, s.unitStart = ms(began.Sub(t0)), ms(newFirst.Sub(began))
	}
	if d, err := r.unitsStopping(ctx, from, t0); err != nil {
		r.Notef("handoff %d: stop jobs not measured: %v", i, err)
	} else {
		s.unitStop = ms(d)
	}
	for _, ev := range r.Obs.Events(t0, newFirst) {
		if ev.Record != nil && ev.Record.Node == from && ev.Record.State == supervisor.Demoting {
			s.demoting = ms(ev.At.Sub(t0))
			break
		}
	}
	if m := handoffTookRE.FindStringSubmatch(out); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			s.reported = ms(d)
		}
	}
	if s.reported < 0 {
		r.Notef("handoff %d: no duration in the command's output: %q", i, out)
	}
	return s, nil
}

// --- 17: freeze ------------------------------------------------------------

func freezeScenario(ctx context.Context, r *Run) error {
	if out, code := r.kha(ctx, r.Leader, "freeze", "--reason", "lab scenario 17"); code != 0 {
		return fmt.Errorf("freeze: exit %d: %s", code, out)
	}
	r.Undo(func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return supervisor.ClearFreeze(cctx, r.Cli, r.Keys)
	})
	r.Mark(time.Now(), r.Leader, "frozen")
	if out, _ := r.kha(ctx, r.Standby, "status"); !strings.Contains(out, "FROZEN") {
		r.Failf("status on %s does not show FROZEN: %q", r.Standby, out)
	}
	// No handoff and no drill while frozen.
	if out, code := r.kha(ctx, r.Leader, "handoff", "--wait", "--timeout", "5s"); code == 0 || !strings.Contains(out, "frozen") {
		r.Failf("handoff while frozen: exit %d, want a refusal naming the freeze: %q", code, out)
	}
	if out, code := r.kha(ctx, r.Leader, "drill", "failover"); code == 0 || !strings.Contains(out, "frozen") {
		r.Failf("drill failover while frozen: exit %d, want a refusal naming the freeze: %q", code, out)
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd (frozen)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	// Fencing stays armed: the leader's units stop on its own timer.
	err = WaitFor(ctx, r.failoverTimeout(), "frozen leader fences", func() (bool, string) {
		t := r.refreshNow()
		return !r.AnyRunning(r.Leader, t), "units still beating on " + r.Leader
	})
	if err != nil {
		return err
	}
	oldLast := latest(r.lastBeats(r.Leader, fault))
	if !oldLast.IsZero() {
		r.Metric(report.MStopped, oldLast.Sub(fault))
		r.Mark(oldLast, r.Leader, "last heartbeat of "+r.Leader+"'s units")
	}
	// Frozen past the old lease's expiry (at most one TTL after the fault):
	// nobody may promote.
	if err := Sleep(ctx, time.Until(fault.Add(r.Profile.TTL+3*time.Second))); err != nil {
		return err
	}
	held := time.Now()
	r.setMS("held_frozen", ms(held.Sub(fault)))
	_ = r.W.Refresh()
	for _, ch := range r.Obs.LeaderChanges(fault, held) {
		if *ch.Leader != "" {
			r.Failf("%s won the election key while frozen", *ch.Leader)
		}
	}
	for _, u := range Units() {
		if ins := r.W.InstancesBetween(r.Standby, u, fault, held); len(ins) > 0 {
			r.Failf("%s ran on the standby %s while frozen", u, r.Standby)
		}
	}
	if rec, ok := r.Obs.Now().Records[r.Standby]; !ok || rec.State != supervisor.Standby {
		r.Failf("standby %s while frozen: %s", r.Standby, describe(rec, ok))
	}
	r.Notef("frozen and cut: %s's units stopped %.0f ms after the cut; nobody promoted for %.1f s", r.Leader, ms(oldLast.Sub(fault)), held.Sub(fault).Seconds())
	unfreeze, err := r.faultless("unfreeze on "+r.Standby, func() error {
		if out, code := r.kha(ctx, r.Standby, "unfreeze"); code != 0 {
			return fmt.Errorf("unfreeze: exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	if first, ok := r.allStartedAfter(r.Standby, unfreeze); ok {
		r.Metric("unfreeze_to_units", first.Sub(unfreeze))
	}
	r.expectStoppedBeforeWin()
	return r.Heal(ctx)
}

// faultless runs an operator step that is not the fault (it keeps FaultAt)
// and marks it on the timeline; it returns when the step began.
func (r *Run) faultless(what string, do func() error) (time.Time, error) {
	t := time.Now()
	r.Mark(t, "", what)
	return t, do()
}

// allStartedAfter is when the last of node's units first beat after t.
func (r *Run) allStartedAfter(node string, t time.Time) (time.Time, bool) {
	_ = r.W.Refresh()
	var all time.Time
	for _, u := range Units() {
		first, ok := r.W.FirstStart(node, u, t)
		if !ok {
			return time.Time{}, false
		}
		all = later(all, first)
	}
	return all, true
}

// --- 18: ban ---------------------------------------------------------------

func banScenario(ctx context.Context, r *Run) error {
	banned, other := r.Leader, r.Standby
	r.Undo(func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := supervisor.ClearBan(cctx, r.Cli, r.Keys, banned)
		return err
	})
	fault, err := r.Fault("`kha-supervisor ban "+banned+"` on "+banned, func() error {
		if out, code := r.kha(ctx, banned, "ban", banned, "--reason", "lab scenario 18"); code != 0 {
			return fmt.Errorf("ban: exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, other); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	err = WaitFor(ctx, r.steadyTimeout(), "banned node standby", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[banned]
		return ok && rec.State == supervisor.Standby, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	if out, _ := r.kha(ctx, other, "status"); !strings.Contains(out, "BANNED") {
		r.Failf("status does not show %s BANNED: %q", banned, out)
	}
	r.Leader, r.Standby, r.LeaderToken = other, banned, r.Obs.Now().Token
	from := time.Now()
	out, code := r.kha(ctx, other, "handoff", "--to", banned, "--wait", "--timeout", "10s")
	if code == 0 || !strings.Contains(out, "banned") {
		r.Failf("handoff --to the banned %s: exit %d, want a refusal naming the ban: %q", banned, code, out)
	} else {
		n := fmt.Sprintf("handoff --to %s refused (exit %d): %s", banned, code, out)
		r.Notef("%s", n)
		r.Res.Figures.BanRefusals = append(r.Res.Figures.BanRefusals, n)
	}
	out, code = r.kha(ctx, other, "handoff", "--wait", "--timeout", "10s")
	if code == 0 {
		r.Failf("handoff to any member with only a banned standby: exit 0: %q", out)
	} else {
		r.Notef("handoff to any member refused (exit %d): %s", code, out)
	}
	// A lease's worth of time: the banned node never campaigns.
	if err := Sleep(ctx, r.Profile.TTL); err != nil {
		return err
	}
	r.NoChange(from, time.Now())
	if out, code := r.kha(ctx, other, "unban", banned); code != 0 {
		return fmt.Errorf("unban: exit %d: %s", code, out)
	}
	r.Mark(time.Now(), "", "unban "+banned)
	// Unbanning does not move the role back.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	r.NoChange(from, time.Now())
	return nil
}

// --- 19: drills ------------------------------------------------------------

// drillTimeline is what `kha-supervisor drill` printed, in seconds from the
// request (NaN-free: a missing step has ok false).
type drillTimeline struct {
	Old, New                 string
	Stopped, Won, Active     float64
	HasStopped, HasWon, HasA bool
}

var (
	drillHeadRE = regexp.MustCompile(`(?m)^drill (handoff|failover): (\S+) -> (\S+)$`)
	drillStepRE = regexp.MustCompile(`(?m)^\s*([+-][0-9.]+)s\s+(\S+): (old units stopped|lease won|new units active)$`)
)

// parseDrill reads a drill's printed timeline.
func parseDrill(out string) (drillTimeline, bool) {
	var t drillTimeline
	m := drillHeadRE.FindStringSubmatch(out)
	if m == nil {
		return t, false
	}
	t.Old, t.New = m[2], m[3]
	for _, s := range drillStepRE.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(s[1], 64)
		if err != nil {
			continue
		}
		switch s[3] {
		case "old units stopped":
			t.Stopped, t.HasStopped = v, true
		case "lease won":
			t.Won, t.HasWon = v, true
		case "new units active":
			t.Active, t.HasA = v, true
		}
	}
	return t, true
}

// drill runs `kha-supervisor drill ARGS` on the leader and records the
// printed timeline in the notes and in Figures.Drills (want is the exit
// the scenario expects).
func (r *Run) drill(ctx context.Context, want int, args ...string) (string, int, drillTimeline, error) {
	var out string
	var code int
	issued, err := r.Fault("`kha-supervisor drill "+strings.Join(args, " ")+"` on "+r.Leader, func() error {
		out, code = r.kha(ctx, r.Leader, append([]string{"drill"}, args...)...)
		return nil
	})
	t, ok := parseDrill(out)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	d := report.Drill{Args: strings.Join(args, " "), Exit: code, WantExit: want, Output: lines}
	r.Notef("%s", d.Note())
	if ok {
		d.Witness = r.noteWitnessOrder(ctx, "drill "+args[0], issued, t.Old, t.New)
	}
	r.Res.Figures.Drills = append(r.Res.Figures.Drills, d)
	return out, code, t, err
}

// noteWitnessOrder notes what the witnesses saw of a takeover from old to
// new issued at t: the old units' last heartbeat and the new ones' first,
// from the command being issued. It is the ground truth to hold a
// command's own timeline (from the members' records) against.
func (r *Run) noteWitnessOrder(ctx context.Context, what string, t time.Time, old, new string) string {
	if _, err := r.waitUnits(ctx, new, t); err != nil {
		r.Notef("%s: witness: %v", what, err)
		return err.Error()
	}
	oldLast := latest(r.lastBeats(old, t))
	var newFirst time.Time
	for _, f := range r.firstBeats(new, t) {
		if newFirst.IsZero() || f.Before(newFirst) {
			newFirst = f
		}
	}
	if oldLast.IsZero() || newFirst.IsZero() {
		return ""
	}
	order := "in order"
	if !newFirst.After(oldLast) {
		order = "OUT OF ORDER"
	}
	seen := fmt.Sprintf("%s's units last beat %+.3fs, %s's first %+.3fs after the command (%s)", old, oldLast.Sub(t).Seconds(), new, newFirst.Sub(t).Seconds(), order)
	r.Notef("%s: witness: %s", what, seen)
	return seen
}

func drills(ctx context.Context, r *Run) error {
	// Planned switchover. A target whose unit start fails for a reason of
	// this host (219/CGROUP) sits out its cooldown, which alone exceeds the
	// expectation: then, and only then, the drill is run again (at most
	// three attempts in all).
	var out string
	var code int
	var t drillTimeline
	for attempt := 1; ; attempt++ {
		from := time.Now()
		var err error
		if out, code, t, err = r.drill(ctx, 0, "handoff", "--expect-within", "10s"); err != nil {
			return err
		}
		if code != 7 || attempt == 3 || !r.promotionFailedSince(from) {
			break
		}
		r.Notef("drill handoff missed its expectation after a failed promotion (noted below); running it again")
		if err := r.resteady(ctx); err != nil {
			return err
		}
	}
	if code != 0 || !strings.Contains(out, "PASS") {
		r.Failf("drill handoff --expect-within 10s: exit %d, want 0 and PASS", code)
	}
	if t.HasA {
		r.setMS("drill_handoff", math.Round(t.Active*1000))
	}
	if err := r.resteady(ctx); err != nil {
		return err
	}

	// Failover: the leader fences without releasing; the standby waits out
	// the lease.
	out, code, t, err := r.drill(ctx, 0, "failover", "--expect-within", "30s")
	if err != nil {
		return err
	}
	if code != 0 || !strings.Contains(out, "PASS") {
		r.Failf("drill failover --expect-within 30s: exit %d, want 0 and PASS", code)
	}
	if t.HasWon && t.HasA {
		r.setMS("drill_failover_won", math.Round(t.Won*1000))
		r.setMS("drill_failover", math.Round(t.Active*1000))
		// The lease was renewed at most a renew interval (plus a late
		// renewal's round trip) before the request, so nobody can win it
		// before TTL - 2 renew intervals have passed.
		if floor := r.Profile.TTL - 2*r.Profile.Renew; time.Duration(t.Won*float64(time.Second)) < floor {
			r.Failf("drill failover: lease won %.3f s after the request, sooner than the lease allows (%s): no lease wait shown", t.Won, floor)
		}
	} else {
		r.Failf("drill failover: timeline incomplete: %q", out)
	}
	if err := r.resteady(ctx); err != nil {
		return err
	}

	// An expectation no failover can meet: the drill must say so.
	out, code, t, err = r.drill(ctx, 7, "failover", "--expect-within", "100ms")
	if err != nil {
		return err
	}
	if code != 7 || !strings.Contains(out, "FAIL") {
		r.Failf("drill failover --expect-within 100ms: exit %d, want 7 and FAIL", code)
	}
	if t.HasA {
		r.setMS("drill_tight_failover", math.Round(t.Active*1000))
	}
	// The failed expectation is not a failed failover: the group recovers.
	return r.resteady(ctx)
}

// --- 21: hooks -------------------------------------------------------------

// Hook paths: the log lives in the shared directory (host side
// SharedPath("hooks")), the program is kha-lab itself.
const (
	hookDir     = master.LabDir + "/hooks"
	hookLog     = hookDir + "/hooks.log"
	hookDropin  = "/etc/systemd/system/kha-supervisor.service.d/91-lab-hooks.conf"
	fencingEnvF = layout.FencingEnv
)

// hookConfig is node's lab configuration plus hooks that log every call.
func (r *Run) hookConfig(node string) []byte {
	argv := func(ev string) []string { return []string{master.LabBinary, "hooklog", "--log", hookLog, ev} }
	c := r.Lab.SupervisorConfig(node)
	c.Hooks.OnPromote, c.Hooks.OnDemote, c.Hooks.OnFence = argv("on_promote"), argv("on_demote"), argv("on_fence")
	c.Hooks.Timeout = config.D(5 * time.Second)
	return lab.ConfigText(c)
}

// reconfigure writes each master's configuration (and the hooks drop-in,
// when dropin is not nil), then restarts the standby's supervisor and the
// leader's (a clean handoff) so that both run it.
func (r *Run) reconfigure(ctx context.Context, cfg func(node string) []byte, dropin []byte) error {
	for _, name := range lab.MasterNames {
		n := r.Nodes[name]
		if err := n.WriteFile(lab.SupervisorConfig, cfg(name), 0o600); err != nil {
			return err
		}
		if dropin != nil {
			if err := n.WriteFile(hookDropin, dropin, 0o644); err != nil {
				return err
			}
		} else if err := n.RemoveFile(hookDropin); err != nil {
			return err
		}
		if out, err := n.Exec(ctx, supervisorBinary, "check-config", "-c", lab.SupervisorConfig); err != nil {
			return fmt.Errorf("check-config on %s: %w: %s", name, err, out)
		}
		if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
			return err
		}
	}
	snap := r.Obs.Now()
	leader := snap.Leader
	order := []string{Other(leader), leader}
	if leader == "" {
		order = lab.MasterNames
	}
	for _, name := range order {
		before := snap.Records[name].Incarnation
		if _, err := r.Nodes[name].Systemctl(ctx, "restart", lab.SupervisorUnit); err != nil {
			return err
		}
		err := WaitFor(ctx, r.steadyTimeout(), name+" restarted", func() (bool, string) {
			rec, ok := r.Obs.Now().Records[name]
			// Standby, or leader again when the other's promotion failed.
			return ok && rec.Incarnation != before && (rec.State == supervisor.Standby || rec.State == supervisor.Active), describe(rec, ok)
		})
		if err != nil {
			return err
		}
	}
	return r.resteady(ctx)
}

func hooksOrder(ctx context.Context, r *Run) error {
	if err := mkdirShared(r.Lab.SharedPath("hooks")); err != nil {
		return err
	}
	// Last clean-up step: the hook log goes once no hook can write it.
	r.Undo(func(context.Context) error { return os.RemoveAll(r.Lab.SharedPath("hooks")) })
	dropin := []byte("# Written by kha-lab (scenario 21): the test hook appends to the shared hook log.\n[Service]\nReadWritePaths=" + hookDir + "\n")
	r.Undo(func(ctx context.Context) error {
		return r.reconfigure(ctx, r.Lab.SupervisorConfigFor, nil)
	})
	if err := r.reconfigure(ctx, r.hookConfig, dropin); err != nil {
		return fmt.Errorf("configure hooks: %w", err)
	}
	r.Mark(time.Now(), "", "hooks configured on both masters")

	// A handoff: on_demote on the old leader, on_promote on the new one.
	a, b, tokA := r.Leader, r.Standby, r.LeaderToken
	t1, err := r.Fault("`kha-supervisor handoff --to "+b+" --wait` on "+a, func() error {
		if out, code := r.kha(ctx, a, "handoff", "--to", b, "--wait", "--timeout", "30s"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := r.waitUnits(ctx, b, t1); err != nil {
		return err
	}
	cs, err := r.clusterStatus(ctx, b)
	if err != nil {
		return err
	}
	if cs.Leader != b {
		return fmt.Errorf("status after the handoff: leader %q, want %s", cs.Leader, b)
	}
	tokB := cs.Token
	r.checkFencingEnv(b, tokB)
	oldA := r.lastBeats(a, t1)

	// A fence: the new leader cut from etcd; on_fence there, on_promote on
	// the other.
	if err := r.resteady(ctx); err != nil {
		return err
	}
	if r.Leader != b {
		return fmt.Errorf("after the handoff %s leads, want %s", r.Leader, b)
	}
	t2, err := r.Fault("cut rack of "+b+" from etcd", func() error { return r.cutFromEtcd(ctx, b, "") })
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, t2, a); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	oldB := r.lastBeats(b, t2)
	cs2, err := r.clusterStatus(ctx, a)
	if err != nil {
		return err
	}
	r.checkFencingEnv(a, cs2.Token)
	if err := r.Heal(ctx); err != nil {
		return err
	}
	// The fenced node's hook runs after its units are down; give it a
	// moment to land.
	if err := Sleep(ctx, time.Second); err != nil {
		return err
	}

	evs, err := readHookLog(r.Lab.SharedPath("hooks", "hooks.log"))
	if err != nil {
		return err
	}
	_ = r.W.Refresh()
	checks := []hookCheck{
		{Phase: "handoff", Event: "on_demote", Node: a, Token: tokA, Since: t1, After: oldA},
		{Phase: "handoff", Event: "on_promote", Node: b, Token: tokB, Since: t1, Before: r.firstBeats(b, t1)},
		{Phase: "cut", Event: "on_fence", Node: b, Token: tokB, Since: t2, After: oldB},
		{Phase: "cut", Event: "on_promote", Node: a, Token: cs2.Token, Since: t2, Before: r.firstBeats(a, t2)},
	}
	for _, c := range checks {
		ev, problems := c.judge(evs)
		for _, p := range problems {
			r.Failf("%s", p)
		}
		if ev != nil {
			r.Notef("%s on %s: token %d, role %s, at %s", ev.Event, ev.Node, ev.Token, ev.Role, ev.At.UTC().Format("15:04:05.000"))
			r.Mark(ev.At, ev.Node, ev.Event+" hook on "+ev.Node)
			r.setMS(c.metricName(), c.margin(*ev))
		}
	}
	return nil
}

// firstBeats returns, per unit, the first heartbeat of node's instance that
// started after t.
func (r *Run) firstBeats(node string, t time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	for _, u := range Units() {
		if first, ok := r.W.FirstStart(node, u, t); ok {
			out[u] = first
		}
	}
	return out
}

// checkFencingEnv checks that the units' environment file on node carries
// token.
func (r *Run) checkFencingEnv(node string, token int64) {
	b, err := readNodeFile(r.Nodes[node], fencingEnvF)
	if err != nil {
		r.Failf("%s: %v", node, err)
		return
	}
	want := fmt.Sprintf("KHA_FENCING_TOKEN=%d", token)
	if !strings.Contains(string(b), want) {
		r.Failf("%s: %s does not say %s: %q", node, fencingEnvF, want, string(b))
	}
}

// hookCheck is one expectation on the hook log: the first Event line of
// Node after Since carries Token, and comes after every time in After (the
// last heartbeats of the units it follows) and before every time in Before
// (the first heartbeats of the units it precedes).
type hookCheck struct {
	Phase         string // handoff or cut: names the metric
	Event, Node   string
	Token         int64
	Since         time.Time
	After, Before map[string]time.Time
}

func (c hookCheck) metricName() string {
	rel := "before_units"
	if c.After != nil {
		rel = "after_units"
	}
	return fmt.Sprintf("%s_%s_%s", c.Phase, strings.TrimPrefix(c.Event, "on_"), rel)
}

// margin is how far the hook ran from the units it is ordered against
// (milliseconds, positive when in order).
func (c hookCheck) margin(ev HookEvent) float64 {
	if c.After != nil {
		return ms(ev.At.Sub(latest(c.After)))
	}
	var first time.Time
	for _, t := range c.Before {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return ms(first.Sub(ev.At))
}

// judge finds the event and lists what is wrong with it. A hook that must
// precede the units is the last such call before their first heartbeat (a
// promotion that failed and was retried calls on_promote twice); one that
// must follow them is the first call after Since.
func (c hookCheck) judge(evs []HookEvent) (*HookEvent, []string) {
	var ev *HookEvent
	match := func(e HookEvent) bool { return e.Event == c.Event && e.Node == c.Node && !e.At.Before(c.Since) }
	if len(c.Before) > 0 {
		var limit time.Time
		for _, t := range c.Before {
			if limit.IsZero() || t.Before(limit) {
				limit = t
			}
		}
		for i := range evs {
			if match(evs[i]) && evs[i].At.Before(limit) {
				ev = &evs[i]
			}
		}
	}
	for i := range evs {
		if ev == nil && match(evs[i]) {
			ev = &evs[i]
		}
	}
	if ev == nil {
		return nil, []string{fmt.Sprintf("no %s hook on %s after %s", c.Event, c.Node, c.Since.UTC().Format("15:04:05.000"))}
	}
	var bad []string
	if ev.Token != c.Token {
		bad = append(bad, fmt.Sprintf("%s on %s: KHA_FENCING_TOKEN %d, status said %d", c.Event, c.Node, ev.Token, c.Token))
	}
	if ev.Cluster != lab.Cluster {
		bad = append(bad, fmt.Sprintf("%s on %s: KHA_CLUSTER %q, want %q", c.Event, c.Node, ev.Cluster, lab.Cluster))
	}
	if ev.Role == "" {
		bad = append(bad, fmt.Sprintf("%s on %s: no KHA_ROLE", c.Event, c.Node))
	}
	if c.After != nil && len(c.After) == 0 {
		bad = append(bad, fmt.Sprintf("%s on %s: no heartbeats of the units it should follow", c.Event, c.Node))
	}
	for u, t := range c.After {
		if !ev.At.After(t) {
			bad = append(bad, fmt.Sprintf("%s on %s ran %.1f ms before the last heartbeat of its %s", c.Event, c.Node, ms(t.Sub(ev.At)), u))
		}
	}
	if c.Before != nil && len(c.Before) < len(Units()) {
		bad = append(bad, fmt.Sprintf("%s on %s: not every unit started after it", c.Event, c.Node))
	}
	for u, t := range c.Before {
		if !ev.At.Before(t) {
			bad = append(bad, fmt.Sprintf("%s on %s ran %.1f ms after the first heartbeat of its %s", c.Event, c.Node, ms(ev.At.Sub(t)), u))
		}
	}
	return ev, bad
}

// mkdirShared creates a directory in the lab's shared directory.
func mkdirShared(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	return nil
}

// readNodeFile reads a file inside a master.
func readNodeFile(n *master.Node, path string) ([]byte, error) {
	b, err := os.ReadFile(n.Root() + path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Name, err)
	}
	return b, nil
}

// readHookLog reads the hook log at path (host side).
func readHookLog(path string) ([]HookEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("hook log: %w", err)
	}
	defer f.Close()
	return ReadHookLog(f)
}
