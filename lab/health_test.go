package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// probingPlane is a real plane as far as the supervisor's configuration
// goes: it gives a [health] section.
type probingPlane struct{}

func (probingPlane) Adjust(*topo.Topology, *etcd.Cluster)             {}
func (probingPlane) Binds() []nspawn.Bind                             { return nil }
func (probingPlane) Start(context.Context) error                      { return nil }
func (probingPlane) InstallUnits(context.Context, *master.Node) error { return nil }
func (probingPlane) Ready(context.Context) error                      { return nil }
func (probingPlane) HealthConfig(node string) config.Health {
	h := config.DefaultHealth()
	h.Insecure = true
	h.Probes = []string{"kube-scheduler.service=https://" + node + ":10259/healthz"}
	return h
}

// The real plane's supervisors get its [health] section; the witness
// lab's get none (the witnesses serve no /healthz).
func TestSupervisorConfigHasTheRealPlanesProbes(t *testing.T) {
	l, err := New(Config{Prefix: "khcfgtest", StateDir: t.TempDir(), Binary: "/bin/true", Profile: Fast})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(l.SupervisorConfigFor("m1")); strings.Contains(s, "healthz") {
		t.Fatalf("the witness lab probes:\n%s", s)
	}
	l.plane = probingPlane{}
	text := string(l.SupervisorConfigFor("m1"))
	// Load it without the TLS files it names (the loader reads them).
	text = strings.NewReplacer("ca = \"/lab/pki/ca.crt\"\n", "", "cert = \"/lab/pki/m1.crt\"\n", "", "key = \"/lab/pki/m1.key\"\n", "").Replace(text)
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("the lab's configuration with probes is refused: %v\n%s", err, text)
	}
	if len(c.Health.Probes) != 1 || !strings.Contains(c.Health.Probes[0], "https://m1:10259/healthz") {
		t.Fatalf("probes %v", c.Health.Probes)
	}
}
