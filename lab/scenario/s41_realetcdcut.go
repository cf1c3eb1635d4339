package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 41 (real plane): the leader's master is cut from the etcd rack
// only. It still reaches the other master and the workers, and its
// components still reach their own apiserver, which has lost its storage.
func init() {
	registerReal(plane.Spec{ID: 41, Layout: lab.LayoutSeparate, Name: "real: leader cut from etcd only",
		Fault: "the scheduler leader's master cut from the three etcd members (it still reaches the other master and the workers)",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			topo := t.R.P.Lab.Topo
			a, b := []string{t.Leader}, topo.InRack("etcd")
			heal := func(ctx context.Context) error { return topo.Heal(ctx, a, b) }
			return heal, topo.Cut(ctx, a, b)
		}})
}
