package scenario

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 65 (real plane, issue 22 item 2): the leader's whole master
// frozen together with its own kube-apiserver (one freezer cgroup, one
// instant: a paused VM that runs its apiserver) while its
// controller-manager creates a burst of pods (scenario 60's ReplicaSet,
// scaled 0 -> burstPods burstLead before the freeze), kept frozen across
// the other master's takeover and thawed after it. Scenario 51 froze the
// container only: its apiserver ran on and its requests were cancelled
// with their clients. Here what the frozen apiserver held (requests
// received, not yet sent to etcd) resumes at the thaw, after the new
// term's first writes: the judge at etcd counts any of them committed
// as a late commit, which fails the trial; the audit logs show what the
// apiservers accepted from the thawed master. So that the trial does not
// depend on a request of the burst being inside the apiserver at the
// freeze (a loaded machine's luck), 50 events of the old master's
// scheduler are also queued at the frozen apiserver just before the thaw
// (as scenario 58 does): served at the thaw, they commit after the new
// term's writes unless etcd refuses them (etcd_fence).
func init() {
	s := &burstTrial{}
	registerReal(plane.Spec{ID: 65, Name: "real: whole leader master frozen with its apiserver during a burst, thawed after the takeover",
		Fault:   fmt.Sprintf("a ReplicaSet scaled 0 -> %d, %s later the cgroup freezer on the leader's container and its kube-apiserver, thawed after the takeover", burstPods, burstLead),
		Prepare: s.prepare,
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			// The token the old term's writes carry in a fenced mode: the
			// one held before the takeover (the webhook refuses it), sent
			// as the gate forwards; in mode off the scheduler's own
			// certificate.
			var old int64
			if t.Mode.Fence != "" {
				var err error
				if old, err = t.R.P.HeldToken(ctx); err != nil {
					return nil, fmt.Errorf("the leader's token: %w", err)
				}
			}
			if err := t.R.AnyFrom(ctx, t.Leader, func(ctx context.Context, c kubernetes.Interface) error { return scaleBurst(ctx, c, burstPods) }); err != nil {
				return nil, fmt.Errorf("scale the burst: %w", err)
			}
			time.Sleep(burstLead)
			t.Mark("frozen")
			thaw, err := t.R.P.FreezeMaster(t.Node())
			if err != nil {
				return nil, err
			}
			t.Mark("frozen_done")
			return func(ctx context.Context) error {
				// A client of the old term that kept sending to the paused
				// apiserver: its requests wait in that apiserver's sockets
				// and are served the instant it resumes, at the same
				// instant its supervisor does, before any fence.
				c, err := t.R.P.SchedulerAt(t.Leader, t.Leader)
				if old != 0 {
					c, err = t.R.P.StaleScheduler(t.Leader, t.Leader, old)
				}
				if err != nil {
					_ = thaw()
					return err
				}
				queued := queueStaleWith(ctx, c)
				if err := Sleep(ctx, 300*time.Millisecond); err != nil {
					_ = thaw()
					return err
				}
				t.Mark("thaw")
				err = thaw()
				t.Mark("thawed")
				sent, refused := queued()
				t.Figures("stale_queued", float64(sent))
				t.Figures("stale_refused_at_client", float64(refused))
				return err
			}, nil
		},
		Judge: judgeThawed})
}

// judgeThawed reports what the apiservers accepted from the thawed
// master after the thaw (the etcd judge counts the late commits).
func judgeThawed(t *plane.Trial, evs []audit.Event, res *report.Result) {
	_, ok := t.Marks["thawed"]
	if !ok {
		res.Problems = append(res.Problems, "never thawed")
		return
	}
	if res.Figures.Values == nil {
		res.Figures.Values = map[string]float64{}
	}
	res.Figures.Values["freeze_ms"] = float64(t.Marks["frozen_done"].Sub(t.Marks["frozen"]).Milliseconds())
	res.Figures.Values["frozen_ms"] = float64(t.Marks["thaw"].Sub(t.Marks["frozen"]).Milliseconds())
	o := audit.Options{Masters: t.R.P.MasterIPs()}
	acc, ref := audit.Since(evs, o, t.Leader, t.Marks["thaw"])
	res.Figures.Values["accepted_after_thaw"], res.Figures.Values["refused_after_thaw"] = float64(acc), float64(ref)
	if last := audit.LastAccepted(evs, o, t.Leader, t.Marks["thaw"]); !last.IsZero() {
		res.Figures.Values["last_accepted_after_thaw_ms"] = float64(last.Sub(t.Marks["thaw"]).Milliseconds())
	}
	note := fmt.Sprintf("frozen %s (freeze took %s); after the thaw the apiservers accepted %d and the policy refused %d managed writes from %s",
		t.Marks["thaw"].Sub(t.Marks["frozen"]).Round(time.Millisecond), t.Marks["frozen_done"].Sub(t.Marks["frozen"]).Round(time.Millisecond), acc, ref, t.Leader)
	res.Notes = append(res.Notes, note)
	if t.Mode.Fence == plane.FenceToken && acc > 0 {
		res.Problems = append(res.Problems, note+": want none with token mode")
	}
}
