package scenario

import (
	"context"
	"fmt"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 55 (real plane, issue 12): scenario 40's fault (the leader's
// rack cut from etcd and the other rack) to compare the failover with
// api_fence.mode = "token" against off: the side-by-side of modes
// kha-fast-token and kha-fast gives the token handover's cost (the new
// leader publishes its token and confirms it on every apiserver before its
// units start).
func init() {
	registerReal(plane.Spec{ID: 55, Name: "real: failover with the token fence (rack cut)",
		Fault: "as 40: the scheduler leader's rack cut from the etcd rack and the other rack",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			s40, ok := RealSpec(40)
			if !ok {
				return nil, fmt.Errorf("scenario 40 is not registered")
			}
			return s40.Inject(ctx, t)
		}})
}
