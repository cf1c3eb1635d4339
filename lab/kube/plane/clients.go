package plane

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
)

// AdminConfigs configure clients of each master's apiserver as the cluster
// admin, connecting from the observer's namespace, in master order.
func (p *Plane) AdminConfigs() ([]*rest.Config, error) {
	var out []*rest.Config
	for _, m := range lab.MasterNames {
		a, err := p.APIServer(m)
		if err != nil {
			return nil, err
		}
		admin := a.AdminPair()
		out = append(out, &rest.Config{
			Host:            a.URL(),
			TLSClientConfig: rest.TLSClientConfig{CAFile: a.CA.CertFile, CertFile: admin.CertFile, KeyFile: admin.KeyFile},
			Dial:            p.Dial,
			Timeout:         5 * time.Second,
			QPS:             100,
			Burst:           200,
		})
	}
	return out, nil
}

// DrillNamespace is the namespace of the drill's own probe (scenario 56;
// the lab's prober keeps probe.DefaultNamespace): the node agents leave
// its pods alone, as they do the prober's.
const DrillNamespace = "kha-drill"

// DrillKubeconfigs writes the admin's kubeconfig of each master's apiserver
// where the masters can read them (the plane's directory), in master
// order: what an operator passes to `drill --probe-kubeconfig`.
func (p *Plane) DrillKubeconfigs() ([]string, error) {
	var out []string
	for _, m := range lab.MasterNames {
		a, err := p.APIServer(m)
		if err != nil {
			return nil, err
		}
		path := p.Dir("drill", "admin-"+m+".kubeconfig")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := kube.WriteKubeconfig(path, a.URL(), a.CA.CertFile, "admin", a.AdminPair()); err != nil {
			return nil, fmt.Errorf("plane: drill kubeconfig of %s: %w", m, err)
		}
		out = append(out, path)
	}
	return out, nil
}
