package scenario

import (
	"context"
	"errors"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 70 (real plane, issue 21 item 5): the standby master frozen
// whole (cgroup freezer, as a VM pause) while the leader's rack is cut
// off; the standby thawed after frozenStandbyFor and the cut healed
// thawToHeal later. Nobody can serve until the thaw: the time that counts
// is from the thaw to the first binding, and no profile may be slower at
// it than another (measured outside the project before: fast took 10 s
// after the thaw, default less).
const (
	frozenStandbyFor = 15 * time.Second
	thawToHeal       = 2 * time.Second
)

func init() {
	registerReal(plane.Spec{ID: 70, Name: "real: standby frozen while the leader's rack is cut, thawed, then healed",
		Fault: "the standby master frozen whole, the scheduler leader's rack cut from the etcd rack and the other rack; the standby thawed 15 s later, the cut healed 2 s after the thaw",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			standby := t.Nodes[t.Standby()]
			thaw, err := t.R.P.Freeze(standby)
			if err != nil {
				return nil, err
			}
			t.Mark("frozen")
			topo := t.R.P.Lab.Topo
			a, b := leaderRackCut(t)
			if err := topo.Cut(ctx, a, b); err != nil {
				return nil, errors.Join(err, thaw())
			}
			t.Mark("cut")
			done := make(chan error, 1)
			go func() {
				time.Sleep(time.Until(t.Marks["frozen"].Add(frozenStandbyFor)))
				errThaw := thaw()
				t.Mark("thawed")
				time.Sleep(thawToHeal)
				errHeal := topo.Heal(context.WithoutCancel(ctx), a, b)
				t.Mark("healed")
				done <- errors.Join(errThaw, errHeal)
			}()
			return func(context.Context) error { return <-done }, nil
		},
		Judge: func(t *plane.Trial, _ []audit.Event, res *report.Result) {
			if res.Figures.Values == nil {
				res.Figures.Values = map[string]float64{}
			}
			for _, m := range []string{"thawed", "healed"} {
				if at, ok := t.Marks[m]; ok {
					res.Figures.Values[m+"_ms"] = float64(at.Sub(res.FaultAt).Milliseconds())
				}
			}
		}})
}
