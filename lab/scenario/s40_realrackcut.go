package scenario

import (
	"context"
	"slices"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 40 (real plane): the leader's rack loses etcd and the other
// rack; the prober's subnet still reaches both apiservers, the cut one
// without its storage.
func init() {
	registerReal(plane.Spec{ID: 40, Name: "real: leader's rack cut off",
		Fault: "the scheduler leader's rack (master, worker) cut from the etcd rack and the other rack",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			topo := t.R.P.Lab.Topo
			a, b := leaderRackCut(t)
			heal := func(ctx context.Context) error { return topo.Heal(ctx, a, b) }
			return heal, topo.Cut(ctx, a, b)
		}})
}

// leaderRackCut is the two sides of a cut of the trial's leader's rack
// (master, worker) from the etcd rack and the other rack.
func leaderRackCut(t *plane.Trial) (rack, rest []string) {
	topo := t.R.P.Lab.Topo
	mine, other := "r1", "r2"
	if t.Leader != "m1" {
		mine, other = "r2", "r1"
	}
	return topo.InRack(mine), slices.Concat(topo.InRack("etcd"), topo.InRack(other))
}
