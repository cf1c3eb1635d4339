package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 48 (real plane): the load-balancer layout. The components'
// kubeconfig names a balancer on their master (plane.Balancer: both
// apiservers behind it, its own first, health-checked on /readyz), and the
// leader's master is cut from the etcd rack only, as in 41. Its components
// still reach a healthy apiserver through the balancer: a component that
// believes it leads can really write. kha-supervisor's supervisor there
// cannot renew its lease and stops its units before the other master can
// win; leader election keeps renewing its Lease through the other
// apiserver and goes on leading from the cut master.
func init() {
	registerReal(plane.Spec{ID: 48, Layout: lab.LayoutSeparate, Name: "real: leader cut from etcd, components through a load balancer",
		Fault:    "as 41, with the components' kubeconfig through a local balancer to both apiservers",
		Balanced: true,
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			topo := t.R.P.Lab.Topo
			a, b := []string{t.Leader}, topo.InRack("etcd")
			heal := func(ctx context.Context) error { return topo.Heal(ctx, a, b) }
			return heal, topo.Cut(ctx, a, b)
		}})
}
