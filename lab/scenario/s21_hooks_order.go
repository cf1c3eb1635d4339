package scenario

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

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
	c.Hooks.Timeout = 5 * time.Second
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
			return ok && rec.Incarnation != before && (rec.State == group.Standby || rec.State == group.Active), describe(rec, ok)
		})
		if err != nil {
			return err
		}
	}
	return r.resteady(ctx)
}

func hooksOrder(ctx context.Context, r *Run) error {
	if err := r.configureHooks(ctx); err != nil {
		return err
	}

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
	r.judgeHooks(evs, checks)
	return nil
}

// configureHooks gives both masters the logging hooks (and the drop-in
// that lets them write the log) until the scenario ends.
func (r *Run) configureHooks(ctx context.Context) error {
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
	return nil
}

// judgeHooks records each check's verdict on the logged hook events, and
// the margins of the hooks it found.
func (r *Run) judgeHooks(evs []HookEvent, checks []hookCheck) {
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
