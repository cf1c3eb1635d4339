package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 69 (real plane, issue 22 item 4): a flapping partition. The
// leader's rack is cut from etcd and the other rack and healed again,
// flapCycles times, each cut and each heal lasting flapCut and flapHeal
// (one batched route change each way, as scenario 60): shorter cuts than
// the TTL, so the leader may survive some and fence on others while the
// standby campaigns between them. Ends healed; the trial judges the whole
// stretch (one leader at a time at the audit logs, no late commit at
// etcd).
//
// Scenario 74 is the same with cuts of 4 s: a 3 s cut is exactly
// --leader-elect tuned 5/3/1's renew deadline (its leader keeps the Lease
// and binds at the heal) and just beyond fast-kill's fence window (3.21 s
// from its last renewal, which may be 250 ms before the cut; the renewal
// gap of a 3 s cut measured 3.25-3.38 s), so 69 costs fast-kill a failover
// in most trials and le-tuned none; 74 is just above both windows, where
// each fails over and what is compared is how fast.
//
// Scenario 76 is 69 behind a dead switch (topo.Silence): the router drops
// the packets silently instead of each host refusing to route them, so a
// connection attempt made in a cut waits on its SYN retransmissions and
// finds the heal only at the next one, as on a real network.
func init() {
	registerReal(flapping(69, 3*time.Second, false))
	registerReal(flapping(74, 4*time.Second, false))
	registerReal(flapping(76, 3*time.Second, true))
}

const (
	flapCycles = 6
	flapHeal   = 2 * time.Second
)

func flapping(id int, cut time.Duration, silent bool) plane.Spec {
	name := "real: flapping partition of the leader's rack"
	if cut != 3*time.Second {
		name += fmt.Sprintf(", %s cuts", cut)
	}
	how := "cut"
	if silent {
		name += " behind a dead switch"
		how = "silenced in the router (dropped without an error to the sender)"
	}
	return plane.Spec{ID: id, Name: name,
		Fault: fmt.Sprintf("the leader's rack %s %s and healed %s, %d times", how, cut, flapHeal, flapCycles),
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			return injectFlapping(ctx, t, cut, silent)
		}}
}

func injectFlapping(ctx context.Context, t *plane.Trial, cut time.Duration, silent bool) (func(context.Context) error, error) {
	topo := t.R.P.Lab.Topo
	a, b := leaderRackCut(t)
	type sides = func(ctx context.Context, a, b []string) error
	var breakLink, heal sides = topo.Cut, topo.Heal
	if silent {
		breakLink, heal = topo.Silence, topo.Unsilence
	}
	done := make(chan error, 1)
	go func() {
		var errs []error
		for i := range flapCycles {
			if ctx.Err() != nil {
				break
			}
			errs = append(errs, breakLink(ctx, a, b))
			time.Sleep(cut)
			errs = append(errs, heal(context.WithoutCancel(ctx), a, b))
			if i < flapCycles-1 {
				time.Sleep(flapHeal)
			}
		}
		t.Mark("flapping_done")
		done <- errors.Join(errs...)
	}()
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return errors.Join(ctx.Err(), heal(context.WithoutCancel(ctx), a, b))
		}
	}, nil
}
