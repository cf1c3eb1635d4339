package scenario

import (
	"context"
	"time"
)

// Scenario 29 (issue 13.4): the same stray copy, beside the running unit on
// the leader. The supervisor must kill the copy, and only the copy: the
// unit's own instance runs through.
func strayCopyLeader(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault("setsid "+witnessOf(scheduler).Binary()+" by hand on the leader "+r.Leader, func() error {
		var err error
		pid, err = r.startStray(ctx, r.Leader)
		return err
	})
	if err != nil {
		return err
	}
	r.Notef("stray copy: PID %d on %s", pid, r.Leader)
	if err := r.judgeStray(ctx, r.Leader, pid, fault); err != nil {
		return err
	}
	if err := Sleep(ctx, time.Second); err != nil {
		return err
	}
	_ = r.W.Refresh()
	end := time.Now()
	if ch := r.Obs.LeaderChanges(fault, end); len(ch) > 0 {
		r.Failf("leadership changed")
	}
	for _, u := range Units() {
		a, ok1 := r.W.InstanceAt(r.Leader, u, fault)
		b, ok2 := r.W.InstanceAt(r.Leader, u, end)
		if !ok1 || !ok2 || a.Key != b.Key {
			r.Failf("%s, the unit itself, did not run through on %s", u, r.Leader)
		}
	}
	return nil
}
