package scenario

import (
	"context"
	"fmt"

	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

// Scenario 28 (issue 13.4): a person starts the managed component's binary
// by hand on the standby, outside any unit. The supervisor must find it
// (a process of a managed component outside its unit's cgroup) and kill
// it within one poll plus the stop budget. The overlap it makes with the
// leader's unit is the person's doing and reported apart (as scenario 10's);
// the verdict is how long it ran.
func strayCopyStandby(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault(fmt.Sprintf("setsid %s by hand on the standby %s", witnessOf(scheduler).Binary(), r.Standby), func() error {
		var err error
		pid, err = r.startStray(ctx, r.Standby)
		return err
	})
	if err != nil {
		return err
	}
	r.Notef("stray copy: PID %d on %s", pid, r.Standby)
	r.excuse = func(o witness.Overlap) bool {
		stray := func(i witness.Instance) bool { return i.Node == r.Standby && i.PID == pid && !i.First.Before(fault) }
		return stray(o.A) || stray(o.B)
	}
	if err := r.judgeStray(ctx, r.Standby, pid, fault); err != nil {
		return err
	}
	if ch := r.Obs.LeaderChanges(fault, r.refreshNow()); len(ch) > 0 {
		r.Failf("leadership changed")
	}
	return nil
}
