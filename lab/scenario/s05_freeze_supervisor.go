package scenario

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

func freezeSupervisor(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault("SIGSTOP of kha-supervisor on "+r.Leader, func() error {
		var err error
		pid, err = r.Signal(ctx, r.Leader, "STOP")
		return err
	})
	if err != nil {
		return err
	}
	n := r.Nodes[r.Leader]
	r.Undo(func(ctx context.Context) error {
		// Gone already when the watchdog did its job; harmless otherwise.
		_, _ = n.Exec(ctx, "kill", "-s", "CONT", strconv.Itoa(pid))
		return nil
	})
	if _, err := r.Failover(ctx, fault, r.Leader, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	// The frozen process must have been killed (by the watchdog), not
	// thawed: it is no longer the main PID.
	now, _ := r.SupervisorPID(ctx, r.Leader)
	if now == pid {
		r.Failf("the frozen supervisor (PID %d) is still the main process: the watchdog did not kill it", pid)
	}
	if j := r.JournalSince(ctx, r.Leader, "", fault); strings.Contains(j, "Watchdog timeout") {
		r.Notef("systemd on %s logged the watchdog timeout", r.Leader)
	} else {
		r.Failf("no watchdog timeout in %s's journal since the fault", r.Leader)
	}
	return nil
}

// etcdLeader returns the member that is raft leader now.
func (r *Run) etcdLeader(ctx context.Context) (string, error) {
	for _, st := range r.Lab.Etcd.Statuses(ctx) {
		if st.Err == nil && st.ID == st.Leader {
			return st.Member, nil
		}
	}
	return "", fmt.Errorf("no etcd member reports itself leader")
}
