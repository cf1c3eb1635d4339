package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

// check-config and run against a real systemd (inside systemd-nspawn):
// install-dropins writes the profile's watchdog, check-config reads what
// systemd will use, refuses a watchdog the window cannot take and a managed
// unit without its TimeoutStopSec, and run refuses the same at start-up
// with the same message (before it needs etcd).
func TestCheckConfigReadsRealSystemd(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "go", "systemd-nspawn", "nsenter", "ip")
	const prefix = "kt-unitchk-"
	if _, err := nspawn.CleanupStale(prefix); err != nil {
		t.Fatalf("cleanup of earlier runs: %v", err)
	}
	lab := t.TempDir()
	if err := os.MkdirAll(filepath.Join(lab, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(lab, "bin", "kha-supervisor"), ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	c, err := nspawn.Boot(ctx, nspawn.Options{Name: prefix + strconv.Itoa(os.Getpid()), Lab: lab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer scancel()
		if err := c.Shutdown(sctx); err != nil {
			t.Errorf("shut down %s: %v", c.Name(), err)
		}
	})
	const bin = "/lab/bin/kha-supervisor"
	write := func(path, text string, mode os.FileMode) {
		t.Helper()
		if err := c.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	// exec runs argv and returns its combined output and exit code.
	exe := func(argv ...string) (string, int) {
		t.Helper()
		cmd := c.Command(ctx, argv...)
		out, err := cmd.CombinedOutput()
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(argv, " "), err, out)
		}
		return string(out), 0
	}
	unit, err := os.ReadFile("../../packaging/systemd/" + dropin.SupervisorUnit)
	if err != nil {
		t.Fatal(err)
	}
	// The packaged unit, pointed at the binary in /lab.
	write("/etc/systemd/system/"+dropin.SupervisorUnit, strings.Replace(string(unit), "ExecStart=/usr/bin/kha-supervisor", "ExecStart="+bin, 1), 0o644)
	for _, u := range e2eUnits {
		write("/etc/systemd/system/"+u, string(managedUnit(u)), 0o644)
	}
	const cfg = "/etc/kha-supervisor/config.toml"
	write(cfg, "node = \"m1\"\nprofile = \"fast\"\n[etcd]\nendpoints = [\"http://127.0.0.1:1\"]\n", 0o600)

	// Before install-dropins: the packaged WatchdogSec=2s fits the fast
	// profile's 6s lease (2.19s), but the managed units still have
	// systemd's default TimeoutStopSec.
	out, code := exe(bin, "check-config", "-c", cfg)
	if code != exitConfig || !strings.Contains(out, "TimeoutStopSec=1m30s (systemd: ") || !strings.Contains(out, "Fix: kha-supervisor install-dropins") {
		t.Fatalf("before install-dropins: exit %d, want %d and the units' TimeoutStopSec refused:\n%s", code, exitConfig, out)
	}
	if out, code = exe(bin, "install-dropins", "-c", cfg, "--binary", bin); code != 0 {
		t.Fatalf("install-dropins: exit %d: %s", code, out)
	}
	out, code = exe(bin, "check-config", "-c", cfg)
	for _, want := range []string{
		"kha-supervisor.service: WatchdogSec=750ms (systemd: /etc/systemd/system/kha-supervisor.service, /etc/systemd/system/kha-supervisor.service.d/50-kha-supervisor.conf): fence window 3.44s, ok",
		"kube-scheduler.service: TimeoutStopSec=1s (systemd: ",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("after install-dropins: exit %d, want 0 and %q:\n%s", code, want, out)
		}
	}
	t.Logf("check-config after install-dropins:\n%s", out[strings.Index(out, "# Installed"):])

	// An administrator's later drop-in with a watchdog the window cannot
	// take: check-config refuses, and so does the daemon at start-up.
	write("/etc/systemd/system/kha-supervisor.service.d/90-local.conf", "[Service]\nWatchdogSec=4s\n", 0o644)
	exe("systemctl", "daemon-reload")
	out, code = exe(bin, "check-config", "-c", cfg)
	const refusal = "kha-supervisor.service: WatchdogSec=4s (systemd: "
	fix := `Fix: remove WatchdogSec= from /etc/systemd/system/kha-supervisor.service.d/90-local.conf (then kha-supervisor install-dropins: profile "fast" writes WatchdogSec=750ms)`
	if code != exitConfig || !strings.Contains(out, refusal) || !strings.Contains(out, "gives fence window 190ms") || !strings.Contains(out, fix) {
		t.Fatalf("WatchdogSec=4s: exit %d, want %d and %q:\n%s", code, exitConfig, refusal, out)
	}
	t.Logf("check-config with WatchdogSec=4s: %s", strings.TrimSpace(out))
	exe("systemctl", "start", "--no-block", dropin.SupervisorUnit)
	var journal string
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		journal, _ = exe("journalctl", "-u", dropin.SupervisorUnit, "-o", "cat", "--no-pager")
		if strings.Contains(journal, "refusing to start") {
			break
		}
	}
	exe("systemctl", "stop", dropin.SupervisorUnit)
	// The same message as check-config's, from where the value was read on.
	same := strings.TrimSpace(out)
	same = same[strings.Index(same, ") gives"):]
	if !strings.Contains(journal, `msg="refusing to start" err="kha-supervisor.service: WatchdogSec=4s (WATCHDOG_USEC of this process`+strings.ReplaceAll(same, `"`, `\"`)) {
		t.Fatalf("run did not refuse with check-config's message; journal:\n%s", journal)
	}
}
