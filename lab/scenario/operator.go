package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

// Operator are the operator scenarios (issue 5, and the package upgrade of
// issue 4): the same steady state, clean-up and overlap check as the
// failure matrix, driving kha-supervisor's operator commands inside the
// masters the way an operator would.
var Operator = []Scenario{
	{16, "handoff-latency", fmt.Sprintf("`kha-supervisor handoff --to OTHER --wait` in the leader, %d times back and forth", HandoffRounds),
		"every unit beating on the target within 500 ms plus the units' own start time", noted(handoffLatency), CI, nil},
	{17, "freeze", "freeze, then the leader's rack cut from etcd for longer than the TTL; unfreeze",
		"the leader still fences; no promotion while frozen; the standby promotes on unfreeze", noted(freezeScenario), CI, nil},
	{18, "ban-leader", "`kha-supervisor ban LEADER`, handoff attempts to it, unban",
		"the leader steps down, the other takes over; handoffs to the banned node refused", noted(banScenario), CI, nil},
	{19, "drills", "drill handoff --expect-within 10s; drill failover --expect-within 30s; drill failover --expect-within 100ms",
		"pass; pass after the lease wait; the last fails with exit 7", noted(drills), CI, nil},
	{20, "leader-endpoint", "/leader polled on both masters every 50 ms across a cut of the leader's rack from etcd",
		"exactly one 200 before and after, never two at once", noted(leaderEndpoint), CI, nil},
	{21, "hooks-order", "on_promote/on_demote/on_fence hooks log to /lab/hooks; a handoff, then the leader's rack cut from etcd",
		"on_promote before the new units' first heartbeat, on_demote/on_fence after the old units' last; hook token = status token", noted(hooksOrder), CI, nil},
	{22, "package-upgrade-remove", "dpkg -i of a higher version on the leader; dpkg -r on the leader after that; dpkg --purge",
		"clean handoffs, the upgraded node back as standby on the new version, guard refuses on it, purge removes /etc/kha-supervisor", noted(packageUpgrade), CI, nil},
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
func (r *Run) clusterStatus(ctx context.Context, node string) (group.ClusterStatus, error) {
	var cs group.ClusterStatus
	out, code := r.kha(ctx, node, "status", "--json")
	if code != 0 && code != 8 && code != 9 && code != 10 { // 8, 9, 10: no active member, local member unhealthy, no standby; the JSON is complete
		return cs, fmt.Errorf("status --json on %s: exit %d: %s", node, code, out)
	}
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		return cs, fmt.Errorf("status --json on %s: %w", node, err)
	}
	return cs, nil
}
