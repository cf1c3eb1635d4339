package plane

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// AdminClients are clients of each master's apiserver as the cluster
// admin, connecting from the observer's namespace, in master order.
func (p *Plane) AdminClients() ([]kubernetes.Interface, error) {
	var out []kubernetes.Interface
	for _, m := range lab.MasterNames {
		a, err := p.APIServer(m)
		if err != nil {
			return nil, err
		}
		f, err := a.Prepare()
		if err != nil {
			return nil, err
		}
		cfg := &rest.Config{
			Host:            a.URL(),
			TLSClientConfig: rest.TLSClientConfig{CAFile: a.CA.CertFile, CertFile: f.Admin.CertFile, KeyFile: f.Admin.KeyFile},
			Dial:            p.Dial,
			Timeout:         5 * time.Second,
			QPS:             100,
			Burst:           200,
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("plane: client of %s: %w", m, err)
		}
		out = append(out, cs)
	}
	return out, nil
}
