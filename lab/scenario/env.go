// Package scenario runs the failure matrix of the design brief (section 8)
// against a lab that is up: each scenario builds the steady state (one
// leader running the units, one standby), injects its fault, waits, heals,
// checks the expected outcome and that no two nodes ran a unit at once, and
// records its timings.
package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

// Env is a lab opened for scenarios.
type Env struct {
	Lab     *lab.Lab
	Obs     *Observer
	W       *witness.Log
	Nodes   map[string]*master.Node
	Profile lab.Profile
	Keys    group.Keys
	Cli     *clientv3.Client
	Log     *slog.Logger

	cancel context.CancelFunc
}

// Open attaches to a running lab. Close releases the observer.
func Open(ctx context.Context, l *lab.Lab, log *slog.Logger) (*Env, error) {
	if err := l.Open(); err != nil {
		return nil, err
	}
	nodes, err := l.Masters()
	if err != nil {
		return nil, err
	}
	cli, err := l.Etcd.Client()
	if err != nil {
		return nil, err
	}
	keys := group.NewKeys(lab.EtcdPrefix, lab.Cluster)
	octx, cancel := context.WithCancel(context.Background())
	obs, err := Observe(octx, cli, keys, log)
	if err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	e := &Env{
		Lab: l, Obs: obs, W: l.Witness(), Nodes: nodes, Profile: l.Config().Profile,
		Keys: keys, Cli: cli, Log: log, cancel: cancel,
	}
	if err := e.W.Refresh(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close stops the observer and the client.
func (e *Env) Close() {
	e.cancel()
	e.Cli.Close()
}

// Other is the master that is not n.
func Other(n string) string {
	if n == "m1" {
		return "m2"
	}
	return "m1"
}

// RackOf is the rack of a master.
func (e *Env) RackOf(node string) string {
	h, err := e.Lab.Topo.Host(node)
	if err != nil {
		panic(err)
	}
	return h.Rack
}

// Units are the witness unit names (without .service).
func Units() []string {
	var out []string
	for _, w := range lab.Witnesses {
		out = append(out, w.Unit)
	}
	return out
}

// beatWithin is how fresh a heartbeat must be for "running now": generous
// against scheduling hiccups of a loaded 2-core machine; the overlap check
// uses the strict 2-period rule.
const beatWithin = 300 * time.Millisecond

// Running reports whether every witness of node beat within beatWithin
// before t (the caller has refreshed the log).
func (e *Env) Running(node string, t time.Time) bool {
	for _, u := range Units() {
		last, ok := e.W.LastBeat(node, u, t)
		if !ok || t.Sub(last) > beatWithin {
			return false
		}
	}
	return true
}

// AnyRunning reports whether any witness of node beat within beatWithin
// before t.
func (e *Env) AnyRunning(node string, t time.Time) bool {
	for _, u := range Units() {
		if last, ok := e.W.LastBeat(node, u, t); ok && t.Sub(last) <= beatWithin {
			return true
		}
	}
	return false
}

// refreshNow reads new heartbeats and returns an instant all of them are
// from (taken before reading).
func (e *Env) refreshNow() time.Time {
	t := time.Now()
	if err := e.W.Refresh(); err != nil {
		e.Log.Warn("witness log", "err", err)
	}
	return t
}

// WaitFor polls cond every 100 ms until it holds or timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		last = why
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not reached within %s (%s)", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (%s)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Steady waits for the state every scenario starts from: exactly one leader
// whose record says active with units running and whose witnesses beat, the
// other member standby, out of cooldown and running nothing.
func (e *Env) Steady(ctx context.Context, timeout time.Duration) (leader, standby string, err error) {
	err = WaitFor(ctx, timeout, "steady state", func() (bool, string) {
		snap := e.Obs.Now()
		t := e.refreshNow()
		l := snap.Leader
		if l == "" {
			return false, "no leader"
		}
		s := Other(l)
		lr, ok1 := snap.Records[l]
		sr, ok2 := snap.Records[s]
		switch {
		case !ok1 || lr.State != group.Active || !lr.UnitsRunning:
			return false, fmt.Sprintf("leader %s record %s", l, describe(lr, ok1))
		case !ok2 || sr.State != group.Standby:
			return false, fmt.Sprintf("standby %s record %s", s, describe(sr, ok2))
		case sr.Cooldown.After(time.Now()):
			return false, fmt.Sprintf("standby %s in cooldown until %s", s, sr.Cooldown.Format("15:04:05"))
		case !e.Running(l, t):
			return false, "leader's witnesses not beating"
		case e.AnyRunning(s, t):
			return false, "standby's witnesses beating"
		}
		leader, standby = l, s
		return true, ""
	})
	return leader, standby, err
}

func describe(r group.Record, ok bool) string {
	if !ok {
		return "missing"
	}
	return fmt.Sprintf("state=%s units_running=%v", r.State, r.UnitsRunning)
}

// SupervisorPID is the MainPID of kha-supervisor inside node (as the
// container sees it), 0 when not running.
func (e *Env) SupervisorPID(ctx context.Context, node string) (int, error) {
	return e.Nodes[node].MainPID(ctx, lab.SupervisorUnit)
}

// Signal sends sig to the supervisor's main process inside node.
func (e *Env) Signal(ctx context.Context, node, sig string) (int, error) {
	pid, err := e.SupervisorPID(ctx, node)
	if err != nil {
		return 0, err
	}
	if pid == 0 {
		return 0, fmt.Errorf("%s: kha-supervisor has no main process", node)
	}
	if _, err := e.Nodes[node].Exec(ctx, "kill", "-s", sig, strconv.Itoa(pid)); err != nil {
		return pid, err
	}
	return pid, nil
}

// Journal returns the last n journal lines of unit inside node.
func (e *Env) Journal(ctx context.Context, node, unit string, n int) string {
	out, _ := e.Nodes[node].Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-n", strconv.Itoa(n), "-u", unit)
	return strings.TrimSpace(string(out))
}

// JournalSince returns the journal of unit inside node from a second before
// since on ("" unit: the whole journal).
func (e *Env) JournalSince(ctx context.Context, node, unit string, since time.Time) string {
	args := []string{"journalctl", "--no-pager", "-o", "cat", "--since", fmt.Sprintf("@%d", since.Unix()-1)}
	if unit != "" {
		args = append(args, "-u", unit)
	}
	out, _ := e.Nodes[node].Exec(ctx, args...)
	return string(out)
}

// Restore brings the lab back to a clean state after a scenario: no
// partitions, every etcd member running, no unit faults, the guard drop-ins
// in place, both supervisors running.
func (e *Env) Restore(ctx context.Context) error {
	if err := e.Lab.Topo.HealAll(ctx); err != nil {
		return err
	}
	for _, m := range lab.EtcdNames {
		_ = e.Lab.Etcd.Resume(m)
		if err := e.Lab.Etcd.Start(m); err != nil {
			return err
		}
	}
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.Lab.Etcd.WaitHealthy(hctx, lab.EtcdNames...); err != nil {
		return err
	}
	if err := e.Lab.ClearFaults(); err != nil {
		return err
	}
	// --no-block: a supervisor that just fenced is between restarts, and a
	// start job would fail with its start-up; systemd brings it back anyway.
	for _, name := range lab.MasterNames {
		if _, err := e.Nodes[name].Exec(ctx, "systemctl", "start", "--no-block", lab.SupervisorUnit); err != nil {
			return err
		}
	}
	return nil
}
