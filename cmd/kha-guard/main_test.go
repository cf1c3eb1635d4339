package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
)

func serve(t *testing.T, sock string, st guard.Status) {
	t.Helper()
	srv, err := guard.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv.SetStatus(func() guard.Status { return st })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func configFor(t *testing.T, sock string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte("node = \"m1\"\n[guard]\nsocket = \""+sock+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func guardRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// kha-guard answers as `kha-supervisor guard` does, against a real guard
// server: allowed on the leader, refused naming the leader on a standby, and
// "not reachable" without a supervisor.
func TestKhaGuardAnswers(t *testing.T) {
	dir := t.TempDir()
	active := filepath.Join(dir, "active", "guard.sock")
	standby := filepath.Join(dir, "standby", "guard.sock")
	serve(t, active, guard.Status{Node: "m1", State: "active", Leader: "m1", Token: 7,
		UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: time.Second})
	serve(t, standby, guard.Status{Node: "m2", State: "standby", Leader: "m1", Token: 7, StopMax: time.Second})

	if code, out, errs := guardRun("-c", configFor(t, active), "kube-scheduler.service"); code != guardcheck.Allowed ||
		!strings.Contains(out, "kube-scheduler.service may start on m1") || errs != "" {
		t.Fatalf("active: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	want := "kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 7)\n"
	if code, out, errs := guardRun("--config", configFor(t, standby), "kube-scheduler.service"); code != guardcheck.Refused || out != "" || errs != want {
		t.Fatalf("standby: exit %d, stdout %q, stderr %q; want %d and %q", code, out, errs, guardcheck.Refused, want)
	}
	if code, _, errs := guardRun("-c", configFor(t, filepath.Join(dir, "none.sock")), "kube-scheduler.service"); code != guardcheck.NoSupervisor ||
		!strings.Contains(errs, "not running or not reachable") {
		t.Fatalf("no supervisor: exit %d, stderr %q", code, errs)
	}
}

// Bad usage exits 2 and names the culprit; -h exits 0.
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
	if code, _, errs := guardRun("-h"); code != 0 || !strings.Contains(errs, "usage: kha-guard [-c FILE] UNIT") {
		t.Errorf("kha-guard -h: exit %d, %q", code, errs)
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
