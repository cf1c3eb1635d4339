package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// maxExposure is the highest `systemd-analyze security` score the packaged
// unit may have (0 is fully locked down, 10 is no sandbox at all; it scored
// 6.3 before the sandbox was tightened).
const maxExposure = 3.0

var exposure = regexp.MustCompile(`Overall exposure level for kha-supervisor\.service: ([0-9.]+)`)

// TestServiceUnitSecurity scores the shipped unit with systemd's own
// analyser and checks the settings the supervisor cannot live without are
// still there: the analyser rewards cutting things off, the daemon needs a
// few of them (systemd over D-Bus, /proc, the network, signals).
func TestServiceUnitSecurity(t *testing.T) {
	testenv.RequireCommands(t, "systemd-analyze")
	unit := filepath.Join(repoRoot(t), "packaging", "systemd", Name+".service")
	out, err := exec.Command("systemd-analyze", "security", "--offline=yes", "--no-pager", unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := exposure.FindSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: %.1f", score)
	if score >= maxExposure {
		t.Errorf("exposure %.1f, want under %.1f:\n%s", score, maxExposure, out)
	}

	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	k := unitKeys(t, string(b))
	for key, want := range map[string]string{
		"PrivateDevices":        "yes", // also: no watchdog device
		"ProtectClock":          "yes",
		"ProtectKernelTunables": "yes",
		"ProtectKernelModules":  "yes",
		"RestrictNamespaces":    "yes",
		"LockPersonality":       "yes",
		// A filtered call fails instead of killing the process mid-fence.
		"SystemCallErrorNumber": "EPERM",
		"ExecReload":            "/bin/kill -HUP $MAINPID",
	} {
		if got := k["Service"][key]; len(got) != 1 || got[0] != want {
			t.Errorf("[Service] %s = %q, want %q", key, got, want)
		}
	}
	caps := strings.Fields(strings.Join(k["Service"]["CapabilityBoundingSet"], " "))
	if !contains(caps, "CAP_KILL") {
		t.Errorf("CapabilityBoundingSet = %q: the supervisor must be able to SIGKILL a managed unit's processes", caps)
	}
	if !contains(caps, "CAP_NET_ADMIN") {
		t.Errorf("CapabilityBoundingSet = %q: a fence must be able to destroy the node's connections to etcd (etcd.reset_on_fence)", caps)
	}
	// What would cut the daemon off from what it needs.
	for key, bad := range map[string]string{
		"ProtectControlGroups": "yes",       // cgroup.kill
		"ProtectProc":          "invisible", // the stray-process scan
		"ProcSubset":           "pid",
		"PrivateUsers":         "yes", // root towards systemd's D-Bus API
		"PrivateNetwork":       "yes",
		"User":                 "",
		"DynamicUser":          "yes",
	} {
		for _, v := range k["Service"][key] {
			if bad == "" || v == bad {
				t.Errorf("[Service] %s=%s would cut the supervisor off from what it needs", key, v)
			}
		}
	}
}

// TestPackagedStartTimeoutCoversDefaults: with the shipped configuration a
// start-up that waits out a killed predecessor's record must not be killed
// by systemd's start timeout.
func TestPackagedStartTimeoutCoversDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "systemd", Name+".service"))
	if err != nil {
		t.Fatal(err)
	}
	got := seconds(t, one(t, unitKeys(t, string(b)), "Service", "TimeoutStartSec"))
	need, err := dropin.StartTimeout(dropin.StartBudgetOf(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	if got < need {
		t.Errorf("TimeoutStartSec=%s, want at least %s for the default configuration", got, need)
	}
}
