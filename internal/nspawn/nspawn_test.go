package nspawn

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

const testPrefix = "kt-ns-"

func requireEnv(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "systemd-nspawn", "nsenter", "ip")
	if _, err := CleanupStale(testPrefix); err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
}

func boot(t *testing.T, suffix string) *Container {
	t.Helper()
	c, err := bootE(t, suffix)
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	return c
}

// bootE boots a container named after the test process and registers its
// shutdown; it may run on any goroutine.
func bootE(t *testing.T, suffix string) (*Container, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("%s%d-%s", testPrefix, os.Getpid(), suffix)
	start := time.Now()
	c, err := Boot(ctx, Options{Name: name})
	if err != nil {
		return nil, err
	}
	t.Logf("booted %s in %s (nspawn pid %d, leader %d)", name, time.Since(start).Round(time.Millisecond), c.PID(), c.Leader())
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := c.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown (cleanup): %v", err)
		}
	})
	return c, nil
}

// assertGone checks that nothing of the container is left on the host.
func assertGone(t *testing.T, c *Container, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil && st.state != "Z" {
			t.Errorf("process %d still running (state %s)", pid, st.state)
		}
	}
	if mps, err := mountsUnder(c.Dir()); err != nil || len(mps) > 0 {
		t.Errorf("mounts left under %s: %v (err %v)", c.Dir(), mps, err)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", c.Name())); !os.IsNotExist(err) {
		t.Errorf("netns %s still exists (stat err %v)", c.Name(), err)
	}
	if _, err := os.Stat(c.Dir()); !os.IsNotExist(err) {
		t.Errorf("directory %s still exists (stat err %v)", c.Dir(), err)
	}
	if procs := nspawnProcs()[c.Name()]; len(procs) > 0 {
		t.Errorf("systemd-nspawn processes for %s still running: %v", c.Name(), procs)
	}
}

func TestBootExecUnitShutdown(t *testing.T) {
	requireEnv(t)
	c := boot(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	out, err := c.Exec(ctx, "systemctl", "is-system-running")
	state := strings.TrimSpace(string(out))
	if state != "running" && state != "degraded" {
		t.Fatalf("is-system-running = %q, err %v", state, err)
	}
	// PID 1 inside is systemd, and it is the leader we report.
	out, err = c.Exec(ctx, "cat", "/proc/1/comm")
	if err != nil || strings.TrimSpace(string(out)) != "systemd" {
		t.Fatalf("/proc/1/comm inside = %q, %v", out, err)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.Leader())); strings.TrimSpace(string(comm)) != "systemd" {
		t.Fatalf("leader %d is %q, want systemd", c.Leader(), comm)
	}
	// The container has its own network namespace.
	hostNet, _ := os.Readlink("/proc/self/ns/net")
	ctNet, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", c.Leader()))
	if hostNet == ctNet || ctNet == "" {
		t.Fatalf("container shares the host network namespace (%s)", ctNet)
	}
	if _, err := os.Stat(strings.TrimPrefix(c.SystemBus(), "unix:path=")); err != nil {
		t.Fatalf("system bus socket: %v", err)
	}

	// A unit written from the host through Root() starts inside.
	unit := "kt-ns-hello.service"
	if err := c.WriteFile("/etc/systemd/system/"+unit, []byte("[Service]\nExecStart=/bin/sleep infinity\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/etc/systemd/system/" + unit); !os.IsNotExist(err) {
		t.Fatalf("unit file leaked to the host's /etc (stat err %v)", err)
	}
	for _, argv := range [][]string{{"systemctl", "daemon-reload"}, {"systemctl", "start", unit}} {
		if _, err := c.Exec(ctx, argv...); err != nil {
			t.Fatal(err)
		}
	}
	out, err = c.Exec(ctx, "systemctl", "is-active", unit)
	if strings.TrimSpace(string(out)) != "active" {
		t.Fatalf("is-active %s = %q, %v", unit, out, err)
	}

	// /lab is shared with the host.
	if _, err := c.Exec(ctx, "sh", "-c", "echo hi > /lab/probe"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(c.Dir(), "lab", "probe")); err != nil || string(b) != "hi\n" {
		t.Fatalf("/lab/probe on host = %q, %v", b, err)
	}

	// A command whose ctx ends is killed inside the container too, not
	// just the nsenter in front of it.
	short, scancel := context.WithTimeout(ctx, time.Second)
	_, err = c.Exec(short, "sleep", "271")
	scancel()
	if err == nil {
		t.Fatal("Exec of sleep 271 with a 1 s ctx returned no error")
	}
	time.Sleep(200 * time.Millisecond)
	if out, _ := c.Exec(ctx, "pgrep", "-f", "sleep 271"); len(out) > 0 {
		t.Fatalf("command outlived its ctx inside the container: pids %s", out)
	}

	nspawnPID, leader := c.PID(), c.Leader()
	start := time.Now()
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("shutdown took %s", time.Since(start).Round(time.Millisecond))
	assertGone(t, c, nspawnPID, leader)
}

// TestCleanupStale simulates a crashed owner: the container keeps running
// but its owner record names a dead process.
func TestCleanupStale(t *testing.T) {
	requireEnv(t)
	c := boot(t, "b")
	nspawnPID, leader := c.PID(), c.Leader()

	// A live owner protects the container.
	cleaned, err := CleanupStale(testPrefix)
	if err != nil || len(cleaned) != 0 {
		t.Fatalf("CleanupStale with live owner: cleaned %v, err %v", cleaned, err)
	}
	if st, err := readStat(nspawnPID); err != nil || st.state == "Z" {
		t.Fatalf("CleanupStale killed a container whose owner is alive")
	}

	// Record a process that has exited as the owner.
	dead := exec.Command("true")
	dead.SysProcAttr = &syscall.SysProcAttr{}
	if err := dead.Start(); err != nil {
		t.Fatal(err)
	}
	st, err := readStat(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	deadRec := fmt.Sprintf("%d %d\n", dead.Process.Pid, st.start)
	_ = dead.Wait()
	if err := os.WriteFile(filepath.Join(c.Dir(), "owner"), []byte(deadRec), 0o644); err != nil {
		t.Fatal(err)
	}

	cleaned, err = CleanupStale(testPrefix)
	if err != nil {
		t.Fatalf("CleanupStale: %v", err)
	}
	if len(cleaned) != 1 || cleaned[0] != c.Name() {
		t.Fatalf("cleaned %v, want [%s]", cleaned, c.Name())
	}
	select {
	case <-c.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("systemd-nspawn not reaped after CleanupStale")
	}
	assertGone(t, c, nspawnPID, leader)
}

// TestTwoAtOnce boots two containers concurrently, as the lab does with its
// two masters: they must not share cgroups, mounts or namespaces.
func TestTwoAtOnce(t *testing.T) {
	requireEnv(t)
	var cs [2]*Container
	var errD error
	done := make(chan struct{})
	go func() {
		defer close(done)
		cs[1], errD = bootE(t, "d")
	}()
	c, errC := bootE(t, "c")
	<-done
	if errC != nil || errD != nil {
		t.Fatalf("Boot: %v; %v", errC, errD)
	}
	cs[0] = c
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, c := range cs {
		// Write a different marker into each; each must see only its own.
		if err := c.WriteFile("/etc/kt-marker", []byte(c.Name()), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec(ctx, "systemd-run", "--unit=kt-ns-both", "/bin/sleep", "infinity"); err != nil {
			t.Fatalf("container %d: %v", i, err)
		}
	}
	for _, c := range cs {
		out, err := c.Exec(ctx, "cat", "/etc/kt-marker")
		if err != nil || string(out) != c.Name() {
			t.Fatalf("%s sees marker %q (%v)", c.Name(), out, err)
		}
		out, _ = c.Exec(ctx, "systemctl", "is-active", "kt-ns-both")
		if strings.TrimSpace(string(out)) != "active" {
			t.Fatalf("%s: kt-ns-both is %q", c.Name(), out)
		}
	}
	for _, c := range cs {
		pids := []int{c.PID(), c.Leader()}
		if err := c.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		assertGone(t, c, pids...)
	}
}
