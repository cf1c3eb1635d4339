package scenario

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

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
