package supervisor_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// strayCopy starts a copy of sleep under a name unique to this test run
// (never a real component's name: other programs on the machine must not
// match), in its own session as a person starting it by hand would.
func strayCopy(t *testing.T, name string, ignoreTERM bool) (*exec.Cmd, string, chan error) {
	t.Helper()
	exe := filepath.Join(t.TempDir(), name)
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "600")
	if ignoreTERM {
		// SIG_IGN survives exec: the copy ignores SIGTERM.
		cmd = exec.Command("/bin/sh", "-c", `trap "" TERM; exec "$0" 600`, exe)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done; done <- nil })
	return cmd, exe, done
}

func strayName(t *testing.T) string {
	return "kt-stray-" + strconv.Itoa(os.Getpid()) + "-" + strings.ToLower(strings.TrimPrefix(t.Name(), "Test")) + "-kube-scheduler"
}

func rogueEvents(t *testing.T, admin *clientv3.Client, k group.Keys, node string) []group.Event {
	t.Helper()
	resp, err := admin.Get(context.Background(), k.History(), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []group.Event
	for _, kv := range resp.Kvs {
		var e group.Event
		if json.Unmarshal(kv.Value, &e) == nil && e.Kind == "rogue_process" && e.Node == node {
			out = append(out, e)
		}
	}
	return out
}

// TestStrayCopyIsStopped (issue 13 item 4): a managed component started by
// hand outside its unit, on the standby and beside the leader's unit, is
// found within a poll, logged, recorded and stopped. The poll alone
// (units.exec_watch off): TestStrayCopyIsKilledAtExec has the exec watch.
func TestStrayCopyIsStopped(t *testing.T) {
	w := newWorld(t)
	name := strayName(t)
	var exe string
	tweak := func(c *config.Config) {
		c.Units.Processes = []string{"/usr/local/bin/" + name}
		c.Units.ExecWatch = false
	}
	a, b := w.Start("m1", tweak), w.Start("m2", tweak)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	cmd, exe, done := strayCopy(t, name, false)
	started := time.Now()
	select {
	case err := <-done:
		done <- err
		t.Logf("stray %s (PID %d) ended after %s: %v", exe, cmd.Process.Pid, time.Since(started).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatalf("stray copy %s (PID %d) still runs 10 s later (poll 250 ms, stop_timeout 1 s)", exe, cmd.Process.Pid)
	}
	// Both members scan this machine's /proc (one process here): whichever
	// polled first stopped it; it counts it and its history says so.
	found := leader.Sup.Status().StrayProcesses + standby.Sup.Status().StrayProcesses
	if found < 1 {
		t.Fatalf("neither member counts the stray in its status")
	}
	var evs []group.Event
	waitFor(t, "a rogue_process history event", 5*time.Second, func() bool {
		evs = append(rogueEvents(t, w.Admin, leader.Sup.Keys(), standby.Name), rogueEvents(t, w.Admin, leader.Sup.Keys(), leader.Name)...)
		return len(evs) > 0
	})
	if !strings.Contains(evs[0].Reason, "pid "+strconv.Itoa(cmd.Process.Pid)) || !strings.Contains(evs[0].Reason, "SIGTERM") {
		t.Fatalf("history event %+v does not name PID %d and the SIGTERM", evs[0], cmd.Process.Pid)
	}
	t.Logf("history: %s (%s) %s", evs[0].Node, evs[0].To, evs[0].Reason)
	if leader.State() != group.Active {
		t.Fatalf("leader is %s after the stray was stopped", leader.State())
	}
	assertNoOverlap(t, a, b)
}

// TestStrayCopyIsReported: with units.stray_policy = "report" the copy is
// logged, counted and shown in status, and left running.
func TestStrayCopyIsReported(t *testing.T) {
	w := newWorld(t)
	name := strayName(t)
	a := w.Start("m1", func(c *config.Config) {
		c.Units.Processes = []string{"/usr/local/bin/" + name}
		c.Units.StrayPolicy = config.StrayReport
	})
	leaderOf(t, a)
	cmd, _, done := strayCopy(t, name, false)
	waitFor(t, "the stray in status", 10*time.Second, func() bool {
		st := a.Sup.Status()
		return len(st.Strays) == 1 && st.Strays[0].PID == cmd.Process.Pid && st.StrayProcesses == 1
	})
	time.Sleep(2 * time.Second) // several polls and more than stop_timeout
	select {
	case err := <-done:
		done <- err
		t.Fatalf("the report policy stopped the stray: %v", err)
	default:
	}
	st := a.Sup.Status()
	if st.StrayProcesses != 1 || st.Strays[0].Action != "reported" || st.Strays[0].PPID != os.Getpid() {
		t.Fatalf("status after several polls: %d found, %+v; want one, reported, with our PID as parent", st.StrayProcesses, st.Strays)
	}
}

// TestStrayCopyIgnoringTermIsKilled: a copy that ignores SIGTERM gets
// SIGKILL after units.stop_timeout (the poll's path: units.exec_watch off).
func TestStrayCopyIgnoringTermIsKilled(t *testing.T) {
	w := newWorld(t)
	name := strayName(t)
	a := w.Start("m1", func(c *config.Config) {
		c.Units.Processes = []string{"/opt/k8s/" + name}
		c.Units.ExecWatch = false
	})
	leaderOf(t, a)
	cmd, _, done := strayCopy(t, name, true)
	started := time.Now()
	select {
	case err := <-done:
		done <- err
		t.Logf("SIGTERM-ignoring stray (PID %d) ended after %s: %v", cmd.Process.Pid, time.Since(started).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("stray ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("SIGTERM-ignoring stray (PID %d) still runs 10 s later", cmd.Process.Pid)
	}
}

// TestStrayCopyIsKilledAtExec (issue 19): with the exec watch (the
// default), a copy started outside its unit is killed at its exec by the
// kernel's event, not at the next poll: SIGKILL, a history event saying
// so, and the status counting it with its time from start to kill.
func TestStrayCopyIsKilledAtExec(t *testing.T) {
	w := newWorld(t)
	name := strayName(t)
	tweak := func(c *config.Config) { c.Units.Processes = []string{"/usr/local/bin/" + name} }
	a, b := w.Start("m1", tweak), w.Start("m2", tweak)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	waitFor(t, "both exec watches on", 10*time.Second, func() bool {
		for _, m := range []*supervisortest.Member{leader, standby} {
			if x := m.Sup.Status().ExecWatch; x == nil || x.Mode != "kernel" || x.Filesystems == 0 {
				return false
			}
		}
		return true
	})
	cmd, _, done := strayCopy(t, name, false)
	started := time.Now()
	select {
	case err := <-done:
		done <- err
		t.Logf("stray (PID %d) ended %s after Start: %v", cmd.Process.Pid, time.Since(started).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("stray ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("stray copy (PID %d) still runs 10 s later", cmd.Process.Pid)
	}
	var evs []group.Event
	waitFor(t, "a rogue_process history event", 5*time.Second, func() bool {
		evs = append(rogueEvents(t, w.Admin, leader.Sup.Keys(), standby.Name), rogueEvents(t, w.Admin, leader.Sup.Keys(), leader.Name)...)
		return len(evs) > 0
	})
	if !strings.Contains(evs[0].Reason, "pid "+strconv.Itoa(cmd.Process.Pid)) || !strings.Contains(evs[0].Reason, "SIGKILL at exec") {
		t.Fatalf("history event %+v does not name PID %d and the kill at exec", evs[0], cmd.Process.Pid)
	}
	t.Logf("history: %s (%s) %s", evs[0].Node, evs[0].To, evs[0].Reason)
	var kills int64
	for _, m := range []*supervisortest.Member{leader, standby} {
		x := m.Sup.Status().ExecWatch
		kills += x.Kills
		t.Logf("%s: exec watch %+v", m.Name, *x)
	}
	if kills < 1 {
		t.Fatal("neither member counts a kill at exec in its status")
	}
	if leader.State() != group.Active {
		t.Fatalf("leader is %s after the stray was killed", leader.State())
	}
}

// TestGateStrangerIsRecordedAsARogueProcess (issue 23 item 4): a process
// an API gate refused is counted with the strays and recorded in the
// history, as the stray scan's finds are.
func TestGateStrangerIsRecordedAsARogueProcess(t *testing.T) {
	w := newWorld(t)
	a := w.Start("m1", func(*config.Config) {})
	leaderOf(t, a)
	a.Sup.ReportGateStranger("kube-scheduler.service", 4242, "kube-scheduler --kubeconfig=/etc/kubernetes/scheduler.conf", "/user.slice/session-9.scope")
	var evs []group.Event
	waitFor(t, "a rogue_process history event", 5*time.Second, func() bool {
		evs = rogueEvents(t, w.Admin, a.Sup.Keys(), a.Name)
		return len(evs) > 0
	})
	if !strings.Contains(evs[0].Reason, "pid 4242") || !strings.Contains(evs[0].Reason, "API gate of kube-scheduler.service") {
		t.Fatalf("history event %+v does not name the PID and the gate", evs[0])
	}
	if n := a.Sup.Status().StrayProcesses; n != 1 {
		t.Fatalf("status counts %d strays, want 1", n)
	}
}
