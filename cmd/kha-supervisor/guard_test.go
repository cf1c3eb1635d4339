package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
	"github.com/kha-supervisor/kha-supervisor/internal/guardtest"
)

func runGuard(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &errb}, append([]string{"guard"}, args...))
	return code, out.String(), errb.String()
}

func TestGuardCommand(t *testing.T) {
	dir := t.TempDir()
	active, standby := guardtest.Group(t)
	code, out, errs := runGuard(t, "-c", active, "kube-scheduler.service")
	if code != exitOK || errs != "" || !strings.Contains(out, "kube-scheduler.service may start on m1") {
		t.Fatalf("active: exit %d, stdout %q, stderr %q", code, out, errs)
	}

	code, out, errs = runGuard(t, "-c", standby, "kube-scheduler.service")
	want := "kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 1234)\n"
	if code != exitGuardRefused || out != "" || errs != want {
		t.Fatalf("standby: exit %d, stdout %q, stderr %q; want %d and %q", code, out, errs, exitGuardRefused, want)
	}

	code, _, errs = runGuard(t, "-c", guardtest.Config(t, filepath.Join(dir, "none", "guard.sock")), "kube-scheduler.service")
	if code != exitGuardNoSup || !strings.Contains(errs, "the supervisor is not running or not reachable") {
		t.Fatalf("no supervisor: exit %d, stderr %q", code, errs)
	}
	if strings.Count(errs, "\n") != 1 {
		t.Fatalf("no supervisor: stderr is not one line: %q", errs)
	}
}

func TestGuardCommandConfigFallback(t *testing.T) {
	dir := t.TempDir()
	fallback := filepath.Join(dir, "fallback", "guard.sock")
	old := guardcheck.FallbackSocket
	guardcheck.FallbackSocket = fallback
	t.Cleanup(func() { guardcheck.FallbackSocket = old })

	missing := filepath.Join(dir, "no-such-config.toml")
	code, _, errs := runGuard(t, "-c", missing, "kube-scheduler.service")
	if code != exitGuardNoSup || !strings.Contains(errs, "cannot load the configuration, asking the default socket "+fallback) {
		t.Fatalf("bad config, nothing at the fallback: exit %d, stderr %q", code, errs)
	}

	guardtest.Serve(t, fallback, guard.Status{Node: "m1", State: "active", Leader: "m1", Token: 5,
		UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: 3 * time.Second})
	code, out, errs := runGuard(t, "-c", missing, "kube-scheduler.service")
	if code != exitOK || !strings.Contains(out, "may start") || !strings.Contains(errs, "asking the default socket") {
		t.Fatalf("bad config, supervisor at the fallback: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}

func TestGuardCommandUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"a.service", "b.service"}, {"-x", "a.service"}} {
		if code, _, _ := runGuard(t, args...); code != exitConfig {
			t.Errorf("guard %q: exit %d, want %d", args, code, exitConfig)
		}
	}
	if code, out, _ := runGuard(t, "-h"); code != exitOK || !strings.Contains(out, "kha-supervisor guard UNIT [flags]") {
		t.Errorf("guard -h: exit %d, %q", code, out)
	}
}

// BenchmarkGuardExec measures what systemd pays per managed unit start: fork
// and exec of the real program, its initialisation, the configuration load
// and one round trip. "kha-guard" is what the drop-ins run; "guard" is the
// same check through the whole kha-supervisor binary (the drop-ins' form
// before kha-guard); "version" (exec and init only) and "true" (/bin/true:
// the machine's fork+exec floor) put them in proportion on a shared, loaded
// machine. It uses $KHA_SUPERVISOR_BIN and the kha-guard beside it, or builds
// both. Reports p50/p99 in ms.
func BenchmarkGuardExec(b *testing.B) {
	bin := os.Getenv("KHA_SUPERVISOR_BIN")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "kha-supervisor")
		for _, c := range []struct{ pkg, out string }{{".", bin}, {"../kha-guard", filepath.Join(filepath.Dir(bin), "kha-guard")}} {
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", c.out, c.pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("go build %s: %v\n%s", c.pkg, err, out)
			}
		}
	}
	guardBin := filepath.Join(filepath.Dir(bin), "kha-guard")
	sock := filepath.Join(b.TempDir(), "run", "guard.sock")
	srv, err := guard.Listen(sock)
	if err != nil {
		b.Fatal(err)
	}
	srv.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv.SetStatus(func() guard.Status {
		return guard.Status{Node: "m1", State: "active", Leader: "m1", Token: 1,
			UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: 3 * time.Second}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	cfg := filepath.Join(b.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte("node = \"m1\"\n[guard]\nsocket = \""+sock+"\"\n"), 0o600); err != nil {
		b.Fatal(err)
	}

	for _, bc := range []struct {
		name string
		argv []string
	}{
		{"kha-guard", []string{guardBin, "-c", cfg, "kube-scheduler.service"}},
		{"guard", []string{bin, "guard", "-c", cfg, "kube-scheduler.service"}},
		{"version", []string{bin, "version"}},
		{"true", []string{"/bin/true"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Wall time suffers from the machine's load; the child's CPU
			// time (user+sys) is what the exec itself costs.
			var lat, cpu []time.Duration
			for b.Loop() {
				cmd := exec.Command(bc.argv[0], bc.argv[1:]...)
				t0 := time.Now()
				out, err := cmd.CombinedOutput()
				lat = append(lat, time.Since(t0))
				if err != nil {
					b.Fatalf("%v: %v: %s", bc.argv, err, out)
				}
				cpu = append(cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			}
			q := func(d []time.Duration, p float64) float64 {
				slices.Sort(d)
				return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond)
			}
			b.ReportMetric(q(lat, 0.5), "p50-ms")
			b.ReportMetric(q(lat, 0.99), "p99-ms")
			b.ReportMetric(q(lat, 1), "max-ms")
			b.ReportMetric(q(cpu, 0.5), "cpu-p50-ms")
			b.ReportMetric(q(cpu, 0.99), "cpu-p99-ms")
		})
	}
}
