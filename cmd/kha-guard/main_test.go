package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
	"github.com/kha-supervisor/kha-supervisor/internal/guardtest"
)

func guardRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// kha-guard answers as `kha-supervisor guard` does, against a real guard
// server: allowed on the leader, refused naming the leader on a standby, and
// "not reachable" without a supervisor.
func TestKhaGuardAnswers(t *testing.T) {
	leader, standby := guardtest.Group(t)
	if code, out, errs := guardRun("-c", leader, "kube-scheduler.service"); code != guardcheck.Allowed ||
		!strings.Contains(out, "kube-scheduler.service may start on m1") || errs != "" {
		t.Fatalf("leader: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	want := "kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 1234)\n"
	if code, out, errs := guardRun("--config", standby, "kube-scheduler.service"); code != guardcheck.Refused || out != "" || errs != want {
		t.Fatalf("standby: exit %d, stdout %q, stderr %q; want %d and %q", code, out, errs, guardcheck.Refused, want)
	}
	if code, _, errs := guardRun("-c", guardtest.Config(t, filepath.Join(t.TempDir(), "none.sock")), "kube-scheduler.service"); code != guardcheck.NoSupervisor ||
		!strings.Contains(errs, "not running or not reachable") {
		t.Fatalf("no supervisor: exit %d, stderr %q", code, errs)
	}
}

// Bad usage exits 2 and names the culprit; so does -h, since 0 would allow
// the start.
func TestKhaGuardUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want exactly one UNIT, got 0"},
		{[]string{"a.service", "b.service"}, "want exactly one UNIT, got 2"},
		{[]string{"-x", "a.service"}, "flag provided but not defined: -x"},
		{[]string{"-c"}, "flag needs an argument: -c"},
	} {
		if code, _, errs := guardRun(tc.args...); code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("kha-guard %q: exit %d, stderr %q; want %d naming %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}
	if code, _, errs := guardRun("-h", "kube-scheduler.service"); code != exitUsage || !strings.Contains(errs, "usage: kha-guard [-c FILE] UNIT") {
		t.Errorf("kha-guard -h: exit %d, %q; want %d (never 0: that would allow the start) and the usage", code, errs, exitUsage)
	}
}

// What the program links is the point of it: none of the daemon's heavy
// dependencies may creep back in through an import.
func TestKhaGuardStaysLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, heavy := range []string{"go.etcd.io/", "k8s.io/", "github.com/prometheus/", "google.golang.org/grpc", "github.com/spf13/cobra", "github.com/coreos/go-systemd", "github.com/godbus/"} {
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, heavy) {
				t.Errorf("kha-guard links %s (via an import): the guard's exec pays its initialisation at every unit start", dep)
			}
		}
	}
}
