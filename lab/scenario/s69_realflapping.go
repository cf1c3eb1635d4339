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
func init() {
	registerReal(plane.Spec{ID: 69, Name: "real: flapping partition of the leader's rack",
		Fault:  fmt.Sprintf("the leader's rack cut %s and healed %s, %d times", flapCut, flapHeal, flapCycles),
		Inject: injectFlapping})
}

const (
	flapCycles = 6
	flapCut    = 3 * time.Second
	flapHeal   = 2 * time.Second
)

func injectFlapping(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
	topo := t.R.P.Lab.Topo
	a, b := leaderRackCut(t)
	done := make(chan error, 1)
	go func() {
		var errs []error
		for i := range flapCycles {
			if ctx.Err() != nil {
				break
			}
			errs = append(errs, topo.Cut(ctx, a, b))
			time.Sleep(flapCut)
			errs = append(errs, topo.Heal(context.WithoutCancel(ctx), a, b))
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
			return errors.Join(ctx.Err(), topo.Heal(context.WithoutCancel(ctx), a, b))
		}
	}, nil
}
