package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 56 (real plane, issue 10): the operator's drill, as
// docs/operations.md shows it: `kha-supervisor drill handoff` run on the
// leader with --probe-kubeconfig for both apiservers, so that the drill
// watches the handoff as a user of the cluster would (pods bound and a
// ReplicaSet pod replaced again). It must PASS, its timeline must end at
// the new units healthy and show both probe lines; the trial judges the
// handoff at the resource like every other fault.
func init() {
	registerReal(plane.Spec{ID: 56, Name: "real: drill handoff watched by its probe",
		Fault: "kha-supervisor drill handoff --probe-kubeconfig (both apiservers) run on the leader",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			if t.Mode.LeaderElect {
				return nil, fmt.Errorf("a drill needs kha-supervisor; mode %s runs none", t.Mode.Name)
			}
			kcs, err := t.R.P.DrillKubeconfigs()
			if err != nil {
				return nil, err
			}
			argv := []string{"kha-supervisor", "drill", "handoff", "--timeout", "60s", "--probe-namespace", plane.DrillNamespace}
			for _, kc := range kcs {
				argv = append(argv, "--probe-kubeconfig", kc)
			}
			out, code := t.Node().Run(ctx, argv...)
			log := filepath.Join(t.R.P.Dir("drill"), fmt.Sprintf("drill-%s-%s.txt", t.Mode.Name, t.Leader))
			_ = os.WriteFile(log, []byte(out), 0o644)
			var missing []string
			for _, want := range []string{"PASS", "new units healthy", "probe: first pod created after the old units stopped bound", "probe: first ReplicaSet pod deleted after the old units stopped replaced"} {
				if !strings.Contains(out, want) {
					missing = append(missing, fmt.Sprintf("%q", want))
				}
			}
			if code != 0 || len(missing) > 0 {
				return nil, fmt.Errorf("%s: exit %d, output without %s:\n%s", strings.Join(argv, " "), code, strings.Join(missing, ", "), out)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "probe:") || strings.Contains(line, "new units healthy") {
					t.Notef("drill: %s", strings.TrimSpace(line))
				}
			}
			return nil, nil
		}})
}
