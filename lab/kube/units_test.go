package kube

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// examplesDir holds the example units operators copy; they must be what the
// lab runs (regenerate: KHA_UPDATE_EXAMPLES=1 go test ./lab/kube -run TestExamples).
const examplesDir = "../../packaging/examples/kubernetes"

func TestExamplesMatchTheLabsUnits(t *testing.T) {
	want, err := Examples()
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KHA_UPDATE_EXAMPLES") == "1" {
		for name, b := range want {
			if err := os.WriteFile(filepath.Join(examplesDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(examplesDir, name))
		if err != nil {
			t.Fatalf("%v (regenerate with KHA_UPDATE_EXAMPLES=1)", err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s drifted from lab/kube's units; regenerate with KHA_UPDATE_EXAMPLES=1 go test ./lab/kube -run TestExamples\n--- want\n%s", name, b)
		}
	}
}

func TestUnitsCarryTheFlagsThatMakeThemBehave(t *testing.T) {
	ex, err := Examples()
	if err != nil {
		t.Fatal(err)
	}
	sched, cm := string(ex["kube-scheduler.service"]), string(ex["kube-controller-manager.service"])
	for _, s := range []string{"--leader-elect=false", "SuccessExitStatus=1", "Restart=on-failure", "--kubeconfig=/etc/kubernetes/scheduler.conf"} {
		if !strings.Contains(sched, s) {
			t.Errorf("scheduler unit lacks %q:\n%s", s, sched)
		}
	}
	for _, s := range []string{"--leader-elect=false", "--use-service-account-credentials=true", "--service-account-private-key-file=/etc/kubernetes/pki/sa.key"} {
		if !strings.Contains(cm, s) {
			t.Errorf("controller-manager unit lacks %q:\n%s", s, cm)
		}
	}
	if strings.Contains(cm, "SuccessExitStatus") {
		t.Errorf("controller-manager dies of SIGTERM; SuccessExitStatus would hide a real exit 1:\n%s", cm)
	}
}

func TestLeaderElectUnitsCarryTheTiming(t *testing.T) {
	c := Component{Name: Scheduler, Binary: "/b", Dir: "/d", CA: testAPIServer(t).CA, Server: "https://x:6443", Address: "10.0.0.1", Port: 10259,
		LeaderElect: true, LeaseDuration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second}
	u, err := c.Unit(ComponentFiles{Kubeconfig: "/k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--leader-elect=true", "--leader-elect-lease-duration=5s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=1s"} {
		if !strings.Contains(string(u), s) {
			t.Errorf("unit lacks %q:\n%s", s, u)
		}
	}
	if strings.Contains(string(u), "SuccessExitStatus") {
		t.Errorf("a leader-electing scheduler does not exit 1 on SIGTERM by design; no SuccessExitStatus:\n%s", u)
	}
	if _, err := (Component{Name: "kube-proxy"}).Unit(ComponentFiles{}); err == nil {
		t.Error("a unit for an unknown component rendered")
	}
}

// The example [health] section is a valid part of kha-supervisor's
// configuration and probes both example units on their secure ports.
func TestExampleHealthSectionLoads(t *testing.T) {
	ex, err := Examples()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(ex[ExampleHealthConfig]), examplePKI+"/ca.crt", ca.CertFile)
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte("node = \"m1\"\nprofile = \"fast\"\n"+text), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatalf("the example [health] section is refused: %v\n%s", err, text)
	}
	// Copied under the fast profile, the example keeps its probe timing.
	if fast := config.Profiles["fast"]; c.Health.Interval != fast.HealthInterval || c.Health.Timeout != fast.HealthTimeout {
		t.Errorf("with profile fast the example probes every %s with a %s timeout, not the profile's %s and %s",
			c.Health.Interval, c.Health.Timeout, fast.HealthInterval, fast.HealthTimeout)
	}
	probes, err := c.Health.ProbeList()
	if err != nil || len(probes) != 2 {
		t.Fatalf("probes %+v, %v", probes, err)
	}
	for _, p := range probes {
		if _, ok := ex[p.Unit]; !ok || !strings.Contains(string(ex[p.Unit]), "--secure-port="+p.URL[strings.LastIndexByte(p.URL, ':')+1:strings.LastIndexByte(p.URL, '/')]) {
			t.Errorf("probe %s=%s does not match the example unit's secure port", p.Unit, p.URL)
		}
	}
}
