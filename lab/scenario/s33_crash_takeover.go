package scenario

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// crashTarget is issue 11.3's target for a crashed leader's takeover, and
// crashAllowance what the lab adds for a shared, noisy machine.
const (
	crashTarget    = 1500 * time.Millisecond
	crashAllowance = time.Second
)

// Scenario 33 (issue 11.3): kill -9 of the leader's supervisor. Its units
// stop at once (BindsTo=); systemd restarts it within about a second, and
// the restarted process, finding its previous incarnation's lease alive
// with the units down, revokes it: the peer (or the restarted node) runs
// the units long before the lease would lapse. Old main waits out the TTL.
func crashTakeover(ctx context.Context, r *Run) error {
	// The fault and the failover are scenario 4's; the bound is this one's.
	if err := killSupervisor(ctx, r); err != nil {
		return err
	}
	if f := r.Res.Metrics[report.MFailover]; time.Duration(f*float64(time.Millisecond)) > crashTarget {
		r.Notef("over the %s target (%.0f ms)", crashTarget, f)
	}
	r.failoverWithin(crashTarget+crashAllowance, "target 1.5 s, plus 1 s for the machine")
	return nil
}
