package systemd_test

import (
	"strings"
	"testing"
	"time"
)

// Stopped reads a real unit's control group in the container: a unit whose
// main process alone is stopped still runs (its child can work); SIGSTOP of
// both makes it stopped; systemctl kill -s SIGCONT resumes it; a unit that
// is down is not stopped. The supervisor reads the group without systemd, so
// this is what its health probes see of a kube-scheduler under SIGSTOP.
func TestStoppedReadsARealUnitsProcesses(t *testing.T) {
	c := container(t)
	s, _ := newPrivateSystemd(t, c)
	const u = "kt-sd-sigstop.service"
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(bg(t, 20*time.Second), u) })
	want := func(what string, stopped bool) {
		t.Helper()
		var got bool
		var err error
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got, err = s.Stopped(u)
			if err != nil {
				t.Fatalf("%s: Stopped(%s): %v", what, u, err)
			}
			if got == stopped || time.Now().After(deadline) {
				break
			}
		}
		if got != stopped {
			t.Fatalf("%s: Stopped(%s) = %v, want %v", what, u, got, stopped)
		}
	}
	waitFor(t, "the unit's two processes", 20*time.Second, func() bool {
		return len(exec(t, c, "systemctl", "show", "-p", "MainPID", "--value", u)) > 0 &&
			len(strings.Fields(exec(t, c, "sh", "-c", "cat /sys/fs/cgroup/systemd/system.slice/"+u+"/cgroup.procs 2>/dev/null || cat /sys/fs/cgroup/system.slice/"+u+"/cgroup.procs"))) == 2
	})
	// "false" is only worth asserting once the main process really is in
	// state T (read inside the container, where MainPID means it).
	holds := func(what string) {
		t.Helper()
		for range 5 {
			if st, err := s.Stopped(u); err != nil || st {
				t.Fatalf("%s: Stopped(%s) = %v, %v; want false", what, u, st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	mainState := func() string {
		pid := show(t, c, u, "MainPID")
		return exec(t, c, "sh", "-c", "cut -d' ' -f3 /proc/"+pid+"/stat")
	}
	holds("running")
	exec(t, c, "systemctl", "kill", "--kill-whom=main", "-s", "SIGSTOP", u)
	waitFor(t, "the main process in state T", 5*time.Second, func() bool { return mainState() == "T" })
	holds("main process stopped, its child running")
	exec(t, c, "systemctl", "kill", "-s", "SIGSTOP", u)
	want("every process stopped", true)
	exec(t, c, "systemctl", "kill", "-s", "SIGCONT", u)
	want("resumed", false)
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	want("down", false)
}
