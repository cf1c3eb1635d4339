package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

func init() { register(drillCommand) }

func drillCommand(e env) *cobra.Command {
	c := &cobra.Command{
		Use:     "drill",
		GroupID: groupGroup,
		Short:   "rehearse a takeover on the live group: drill handoff|failover",
		Long: `Rehearse a takeover on the live group and check the result from the members' own records.
Either prints the timeline and PASS when the old leader's units were recorded stopped before the new leader won the lease, or FAIL and exit status 7; with --expect-within it also fails when the new units were not active within that long of the request. Refused when no standby could take over.`,
		RunE: func(c *cobra.Command, args []string) error {
			_ = c.Help()
			return exit(exitConfig)
		},
	}
	c.AddCommand(drillKind(e, "handoff", "request a handoff (optionally --to NODE) and wait for the new leader"),
		drillKind(e, "failover", "ask the leader to fence as if its renewals had failed; the others must wait out its lease"))
	return c
}

func drillKind(e env, kind, short string) *cobra.Command {
	var to string
	c := &cobra.Command{Use: kind, Short: short, Long: strings.ToUpper(short[:1]) + short[1:] + "; then check the timeline (see drill)."}
	cf := addClientFlags(c)
	expect := durationFlag(c.Flags(), "expect-within", 0, "fail unless the new units are active within this long of the request")
	timeout := durationFlag(c.Flags(), "timeout", 90*time.Second, "give up waiting for a new leader after this long")
	probeKCs := c.Flags().StringSlice("probe-kubeconfig", nil, "kubeconfig `file` of an apiserver (repeat for each, tried in order): also watch the drill as a user (a pod every 200 ms and a ReplicaSet pod deleted every 2 s in --probe-namespace, deleted afterwards) and fail unless pods are bound and replaced again within --timeout")
	probeNS := c.Flags().String("probe-namespace", probe.DefaultNamespace, "`namespace` the probe creates for itself and deletes afterwards with everything in it: never name one that holds anything else")
	if kind == "handoff" {
		c.Flags().StringVar(&to, "to", "", "`node` that should take over")
		_ = c.RegisterFlagCompletionFunc("to", completeMembers(e, cf))
	}
	c.RunE = func(c *cobra.Command, _ []string) error {
		if to != "" {
			if code := checkNode(e, "--to", to); code != exitOK {
				return exit(code)
			}
		}
		if *timeout <= 0 {
			return exit(fail(e, exitConfig, "--timeout must be positive"))
		}
		if errs := validation.IsDNS1123Label(*probeNS); len(errs) > 0 {
			return exit(fail(e, exitConfig, "--probe-namespace %q: %s", *probeNS, strings.Join(errs, "; ")))
		}
		return withSession(e, c, cf, func(s *session) int { return s.drill(e, kind, to, *expect, *timeout, *probeKCs, *probeNS) })
	}
	return c
}

// timeline is what a drill reconstructs from the members' history.
type timeline struct {
	requested   time.Time
	oldNode     string
	newNode     string
	oldStopped  time.Time   // old leader's units confirmed stopped
	leaseWon    time.Time   // new leader won the election key
	unitsActive time.Time   // new leader's units confirmed active
	steps       string      // the new leader's promotion steps, from win to start ("barrier 12ms, ...")
	health      drillHealth // with [health] probes: the new units healthy (drillhealth.go)

	handover apiHandover // apifencedrill.go: the token handover (token mode)
}

// check is the drill's verdict: the old units stopped before the new
// leader won (which is before its units started), and the whole took no
// longer than expect (0: no expectation).
func (t timeline) check(expect time.Duration) []string {
	var bad []string
	switch {
	case t.oldStopped.IsZero():
		bad = append(bad, fmt.Sprintf("no record that %s's units stopped", t.oldNode))
	case t.leaseWon.IsZero():
		bad = append(bad, "no record of the new leader winning the lease")
	case !t.oldStopped.Before(t.leaseWon):
		bad = append(bad, fmt.Sprintf("%s won the lease at %s, before %s's units were recorded stopped at %s",
			t.newNode, t.leaseWon.Format("15:04:05.000"), t.oldNode, t.oldStopped.Format("15:04:05.000")))
	}
	last := t.unitsActive
	if len(t.health.probed) > 0 {
		last = t.health.healthy // the timeline ends when the new units are healthy
	}
	if p := t.health.problem(t.newNode); p != "" {
		bad = append(bad, p)
	}
	if t.unitsActive.IsZero() {
		bad = append(bad, "no record of the new leader's units becoming active")
	} else if took := last.Sub(t.requested); expect > 0 && !last.IsZero() && took > expect {
		bad = append(bad, fmt.Sprintf("took %s, more than the expected %s", took.Round(time.Millisecond), expect))
	}
	return append(bad, t.handover.check(t)...)
}

func (t timeline) print(w io.Writer) {
	at := func(x time.Time) string {
		if x.IsZero() {
			return "      (missing)"
		}
		return fmt.Sprintf("%+10.3fs", x.Sub(t.requested).Seconds())
	}
	fmt.Fprintf(w, "  %s  request\n", at(t.requested))
	fmt.Fprintf(w, "  %s  %s: old units stopped\n", at(t.oldStopped), t.oldNode)
	fmt.Fprintf(w, "  %s  %s: lease won\n", at(t.leaseWon), t.newNode)
	t.handover.print(w, at, t.newNode)
	fmt.Fprintf(w, "  %s  %s: new units active\n", at(t.unitsActive), t.newNode)
	if t.steps != "" {
		fmt.Fprintf(w, "  %15s  %s: promotion steps: %s\n", "", t.newNode, t.steps)
	}
	if len(t.health.probed) > 0 {
		fmt.Fprintf(w, "  %s  %s: new units healthy\n", at(t.health.healthy), t.newNode)
	}
}

// promotionSteps is the step list of a units_started event's reason,
// "units started (barrier 12ms, ...)"; "" for an older daemon's reason.
func promotionSteps(reason string) string {
	inner, ok := strings.CutPrefix(reason, "units started (")
	if !ok {
		return ""
	}
	return strings.TrimSuffix(inner, ")")
}

// fill reads the history after the request and finds the three events.
// History is written asynchronously, so it polls briefly until complete.
func (s *session) fill(e env, t *timeline, stoppedTo group.State) {
	for range 50 {
		ctx, cancel := s.ctx(e)
		evs, err := group.ReadHistory(ctx, s.cli, s.keys, 200)
		cancel()
		if err == nil {
			for _, ev := range evs {
				if ev.At.Before(t.requested) {
					continue
				}
				switch {
				case ev.Node == t.oldNode && ev.To == stoppedTo && t.oldStopped.IsZero():
					t.oldStopped = ev.At
				case ev.Node == t.newNode && ev.To == group.Promoting && t.leaseWon.IsZero():
					t.leaseWon = ev.At
				case ev.Node == t.newNode && ev.To == group.Active && t.unitsActive.IsZero():
					t.unitsActive = ev.At
					t.steps = promotionSteps(ev.Reason)
				}
			}
		}
		if !t.oldStopped.IsZero() && !t.leaseWon.IsZero() && !t.unitsActive.IsZero() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *session) drill(e env, kind, to string, expect, timeout time.Duration, probeKCs []string, probeNS string) int {
	dp, err := startDrillProbe(probeKCs, probeNS)
	var bad *badProbeFlag
	switch {
	case errors.As(err, &bad):
		return fail(e, exitConfig, "%v", err)
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	defer dp.stop()
	start := s.drillFailover
	if kind == "handoff" {
		start = func(e env, timeout time.Duration) (timeline, group.State, int) { return s.drillHandoff(e, to, timeout) }
	}
	t, stoppedTo, code := start(e, timeout)
	if code != exitOK {
		return code
	}
	s.fill(e, &t, stoppedTo)
	s.fillHandover(e, &t)
	t.health = s.waitHealthy(e, t.newNode, t.requested, timeout)
	// From the old units' stop: a pod bound or a ReplicaSet pod replaced
	// before it may be the old leader's work (seen on the real plane: a
	// replacement 0.17 s after a handoff's request, by the old
	// controller-manager).
	from := t.requested
	if t.oldStopped.After(from) {
		from = t.oldStopped
	}
	dp.finish(t.requested, from, timeout)
	fmt.Fprintf(e.stdout, "drill %s: %s -> %s\n", kind, t.oldNode, t.newNode)
	t.print(e.stdout)
	dp.print(e.stdout)
	ev := action("drill-result", t.oldNode, kind)
	if bad := append(t.check(expect), dp.problems()...); len(bad) > 0 {
		for _, b := range bad {
			fmt.Fprintln(e.stdout, "FAIL:", b)
		}
		ev.Outcome = "FAIL: " + strings.Join(bad, "; ")
		s.record(e, ev)
		return exitDrillFailed
	}
	ev.Outcome = fmt.Sprintf("PASS: %s -> %s", t.oldNode, t.newNode)
	s.record(e, ev)
	fmt.Fprintln(e.stdout, "PASS: old units stopped before the new leader won the lease")
	return exitOK
}

// drillHandoff requests a handoff (refused, exit 2, as the handoff
// command refuses it) and waits for the new leader; a new leader that does
// not come within timeout fails the drill (exit 7), as in drillFailover.
func (s *session) drillHandoff(e env, to string, timeout time.Duration) (timeline, group.State, int) {
	res, code := s.handoff(e, handoffArgs{to: to, reason: "drill handoff", wait: true, timeout: timeout})
	if code != exitOK {
		return timeline{}, "", code
	}
	fmt.Fprintf(e.stdout, "handoff drill %s: asked %s (token %d) to step down for %s\n", res.id, res.from, res.oldToken, orAny(to))
	ncs, err := s.waitNewLeader(e, res.oldToken, to, timeout)
	if err != nil {
		ev := action("drill-result", res.from, "handoff")
		ev.Outcome = "FAIL: " + err.Error()
		s.record(e, ev)
		return timeline{}, "", fail(e, exitDrillFailed, "drill %s: %v; the request stands until it expires at %s (in %s): `kha-supervisor handoff --cancel` withdraws it",
			res.id, err, stamp(res.expires), time.Until(res.expires).Round(time.Second))
	}
	s.clearFulfilled(e, res.id)
	return timeline{requested: res.requested, oldNode: res.from, newNode: ncs.Leader}, group.UnitsDown, exitOK
}

// drillFailover asks the leader to fence and waits for the new leader.
func (s *session) drillFailover(e env, timeout time.Duration) (timeline, group.State, int) {
	cs, err := s.cluster(e)
	if err != nil {
		return timeline{}, "", fail(e, exitFailure, "%v", err)
	}
	switch {
	case cs.Control.Freeze != nil:
		return timeline{}, "", fail(e, exitConfig, "refused: the group is frozen (%s); unfreeze first", cs.Control.Freeze.Reason)
	case cs.Leader == "":
		return timeline{}, "", fail(e, exitConfig, "refused: no member holds the lease right now; nothing to drill")
	case len(successors(cs, time.Now())) == 0:
		return timeline{}, "", fail(e, exitConfig, "refused: no standby member could take over; the drill would leave the group without units")
	}
	d := group.Drill{ID: group.NewID(), Kind: "failover", Token: cs.Token, At: time.Now()}
	ctx, cancel := s.ctx(e)
	err = group.RequestDrill(ctx, s.cli, s.keys, d, 4*s.cfg.Lease.TTL)
	cancel()
	switch {
	case errors.Is(err, group.ErrLeadershipOver):
		return timeline{}, "", fail(e, exitConfig, "refused: %s stepped down meanwhile (token %d is over); nothing requested", cs.Leader, cs.Token)
	case err != nil:
		return timeline{}, "", fail(e, exitFailure, "%v", err)
	}
	ev := action("drill-failover", cs.Leader, "")
	ev.Token, ev.Outcome = cs.Token, "requested "+d.ID+": the leader fences as if its renewals had failed"
	s.record(e, ev)
	fmt.Fprintf(e.stdout, "failover drill %s: asked %s (token %d) to fence as if its renewals had failed; the others must wait out its lease (%s)\n",
		d.ID, cs.Leader, cs.Token, s.cfg.Lease.TTL)
	ncs, err := s.waitNewLeader(e, cs.Token, "", timeout)
	if err != nil {
		ev := action("drill-result", cs.Leader, "failover")
		ev.Outcome = "FAIL: " + err.Error()
		s.record(e, ev)
		return timeline{}, "", fail(e, exitDrillFailed, "drill %s: %v", d.ID, err)
	}
	return timeline{requested: d.At, oldNode: cs.Leader, newNode: ncs.Leader}, group.Fenced, exitOK
}
