package scenario

import (
	"context"
	"errors"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 71 (real plane, issue 21 item 1): the etcd member that is raft
// leader stalled with SIGSTOP for etcdStall, whatever the service does, as
// lab 38 stalls it under the stand-ins: a long fsync or GC pause. The
// other members elect a new leader within about two election timeouts
// (stock: 1 s each). What it measures is robustness: whether leadership
// moved, whether a component exited (the side-by-side's columns), and how
// long the service stopped. A mode tuned too tight loses its lease to a
// pause etcd itself rides out; scenario 68 is the same fault held until
// the service works again.
const etcdStall = 3 * time.Second

func init() {
	registerReal(plane.Spec{ID: 71, Layout: lab.LayoutSeparate, Name: "real: etcd raft leader stalled for 3 s (SIGSTOP)",
		Fault: "SIGSTOP of the etcd member that is raft leader, SIGCONT 3 s later",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			e := t.R.P.Lab.Etcd
			victim, err := t.R.P.EtcdLeader(ctx)
			if err != nil {
				return nil, err
			}
			t.Notef("stalled etcd member %s (raft leader) for %s", victim, etcdStall)
			if err := e.Pause(victim); err != nil {
				return nil, err
			}
			t.Mark("stalled")
			done := make(chan error, 1)
			go func() {
				time.Sleep(time.Until(t.Marks["stalled"].Add(etcdStall)))
				err := e.Resume(victim)
				t.Mark("resumed")
				done <- err
			}()
			return func(ctx context.Context) error {
				return errors.Join(<-done, e.WaitHealthy(ctx, e.Members...))
			}, nil
		},
		Judge: func(t *plane.Trial, _ []audit.Event, res *report.Result) {
			if at, ok := t.Marks["resumed"]; ok {
				if res.Figures.Values == nil {
					res.Figures.Values = map[string]float64{}
				}
				res.Figures.Values["resumed_ms"] = float64(at.Sub(res.FaultAt).Milliseconds())
			}
		}})
}
