package scenario

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

func gracefulStop(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	var took time.Duration
	fault, err := r.Fault("systemctl stop kha-supervisor on "+r.Leader, func() error {
		t := time.Now()
		_, err := n.Systemctl(ctx, "stop", lab.SupervisorUnit)
		took = time.Since(t)
		return err
	})
	if err != nil {
		return err
	}
	r.Metric("systemctl_stop", took)
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	_ = r.W.Refresh()
	var oldLast, newFirst time.Time
	for _, u := range Units() {
		if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(oldLast) {
			oldLast = t
		}
		if t, ok := r.W.FirstStart(r.Standby, u, fault); ok && t.After(newFirst) {
			newFirst = t
		}
	}
	r.Metric("handoff", newFirst.Sub(oldLast))
	r.expectStoppedBeforeWin()
	return nil
}
