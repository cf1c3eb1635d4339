package scenario

import (
	"context"
	"slices"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 46 (real plane): a minority partition. The leader's rack
// (master, worker) and one etcd member, a follower (so that no etcd leader
// change mixes in), are cut from the other rack and the other two members:
// the leader still reaches a member, which has no quorum. The prober's
// subnet reaches both sides.
func init() {
	registerReal(plane.Spec{ID: 46, Layout: lab.LayoutSeparate, Name: "real: minority partition",
		Fault: "the leader's rack and one etcd follower cut from the other rack and the other two etcd members",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			topo := t.R.P.Lab.Topo
			lead, err := t.R.P.EtcdLeader(ctx)
			if err != nil {
				return nil, err
			}
			var cut string
			var majority []string
			for _, m := range lab.EtcdNames {
				if m != lead && cut == "" {
					cut = m
				} else {
					majority = append(majority, m)
				}
			}
			rack := map[string]string{"m1": "r1", "m2": "r2"}[t.Leader]
			a := append(topo.InRack(rack), cut)
			b := slices.Concat(majority, topo.InRack(map[string]string{"r1": "r2", "r2": "r1"}[rack]))
			t.Notef("minority %v, majority %v", a, b)
			heal := func(ctx context.Context) error { return topo.Heal(ctx, a, b) }
			return heal, topo.Cut(ctx, a, b)
		}})
}
