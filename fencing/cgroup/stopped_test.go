package cgroup_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/cgroup"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// A group is stopped only while every one of its processes is: SIGSTOP of
// one of two processes is not enough, SIGCONT undoes it, and an empty group
// is down, not stopped. The processes are real; only the group is a file.
func TestStoppedNeedsEveryProcessStopped(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	const g = "/system.slice/kube-scheduler.service"
	root := fakeTree(t, ".", g, map[string][]int{".": {a.Process.Pid}, "sub": {b.Process.Pid}})
	fs := cgroup.FS{Root: root}
	want := func(what string, stopped bool) {
		t.Helper()
		var got bool
		var err error
		// The kernel stops a process's threads as each next handles its
		// signals: give it a moment, then require the answer.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got, err = fs.Stopped(g)
			if err != nil {
				t.Fatalf("%s: Stopped: %v", what, err)
			}
			if got == stopped || time.Now().After(deadline) {
				break
			}
		}
		if got != stopped {
			t.Fatalf("%s: Stopped = %v, want %v", what, got, stopped)
		}
	}
	// "false" is only worth asserting once the signalled process really is
	// in state T: right after kill(2) it may not be yet.
	holds := func(what string) {
		t.Helper()
		for range 5 {
			if st, err := fs.Stopped(g); err != nil || st {
				t.Fatalf("%s: Stopped = %v, %v; want false", what, st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	holds("both running")
	signal(t, a.Process.Pid, syscall.SIGSTOP)
	waitState(t, a.Process.Pid, 'T')
	holds("one of two stopped (the other in a sub-group)")
	signal(t, b.Process.Pid, syscall.SIGSTOP)
	want("both stopped", true)
	signal(t, a.Process.Pid, syscall.SIGCONT)
	waitNotState(t, a.Process.Pid, 'T')
	holds("one resumed")
	signal(t, b.Process.Pid, syscall.SIGCONT)

	empty := fakeTree(t, ".", g, map[string][]int{".": nil})
	if st, err := (cgroup.FS{Root: empty}).Stopped(g); err != nil || st {
		t.Fatalf("empty group: Stopped = %v, %v; want false (down, not stopped)", st, err)
	}
	if st, err := (cgroup.FS{Root: empty}).Stopped("/system.slice/absent.service"); err != nil || st {
		t.Fatalf("absent group: Stopped = %v, %v; want false", st, err)
	}
	if _, err := fs.Stopped("/"); err == nil {
		t.Fatal("Stopped(\"/\") did not refuse the root group")
	}
	// A process outside this PID namespace (listed as 0) could be running:
	// say so rather than guess.
	hidden := fakeTree(t, ".", g, map[string][]int{".": {0}, "sub": {b.Process.Pid}})
	signal(t, b.Process.Pid, syscall.SIGSTOP)
	waitState(t, b.Process.Pid, 'T')
	if st, err := (cgroup.FS{Root: hidden}).Stopped(g); err == nil || st {
		t.Fatalf("a process outside the namespace beside a stopped one: Stopped = %v, %v; want an error", st, err)
	}
	signal(t, b.Process.Pid, syscall.SIGCONT)
}

// A process whose first thread has exited while another runs shows Z in
// its own /proc stat (ps: Zl) and is alive: Procs lists it, so that the
// fence's direct kill signals it and does not confirm the group empty
// while it runs; Stopped looks at its live thread, and so does a SIGSTOP.
func TestAProcessWithItsFirstThreadGoneIsAlive(t *testing.T) {
	testenv.RequireCommands(t, "python3")
	cmd := exec.Command("python3", "-c", `import ctypes, threading, time
threading.Thread(target=lambda: time.sleep(600)).start()
ctypes.CDLL(None).pthread_exit(None)`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	waitState(t, pid, 'Z') // the first thread is gone, the sleeping one is not
	const g = "/system.slice/kube-scheduler.service"
	fs := cgroup.FS{Root: fakeTree(t, ".", g, map[string][]int{".": {pid}})}
	got, err := fs.Procs(g)
	if err != nil || !slices.Equal(got, []int{pid}) {
		t.Fatalf("Procs = %v, %v; want [%d]: a process with a live thread is alive", got, err, pid)
	}
	if st, err := fs.Stopped(g); err != nil || st {
		t.Fatalf("running: Stopped = %v, %v; want false", st, err)
	}
	signal(t, pid, syscall.SIGSTOP)
	waitStopped(t, fs, g, true)
	signal(t, pid, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fs.Kill(ctx, g); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("python3 %d: %v, want killed", pid, err)
	}
}

// A group the cgroup v2 freezer holds is stopped whatever its processes'
// state letters say (a frozen task shows S): read from cgroup.events.
func TestStoppedSeesTheFreezersEvents(t *testing.T) {
	a := sleeper(t)
	const g = "/system.slice/kube-scheduler.service"
	root := fakeTree(t, "unified", g, map[string][]int{".": {a.Process.Pid}})
	fs := cgroup.FS{Root: root}
	events := filepath.Join(root, "unified", g, "cgroup.events")
	for _, c := range []struct {
		events string
		want   bool
	}{
		{"populated 1\nfrozen 0\n", false},
		{"populated 1\nfrozen 1\n", true},
	} {
		if err := os.WriteFile(events, []byte(c.events), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := fs.Stopped(g); err != nil || got != c.want {
			t.Fatalf("cgroup.events %q: Stopped = %v, %v; want %v", c.events, got, err, c.want)
		}
	}
}

// The real freezer: a process moved into a new group of the machine's
// cgroup v2 hierarchy, frozen with cgroup.freeze (as `systemctl freeze`
// does) and thawed again. Root only; it fails, not skips, without root.
func TestStoppedSeesARealFrozenGroup(t *testing.T) {
	testenv.RequireRoot(t)
	fs := cgroup.FS{}
	unified := ""
	for _, h := range []string{cgroup.DefaultRoot, filepath.Join(cgroup.DefaultRoot, "unified")} {
		if _, err := os.Stat(filepath.Join(h, "cgroup.subtree_control")); err == nil {
			unified = h
			break
		}
	}
	if unified == "" {
		t.Fatalf("no cgroup v2 hierarchy under %s (neither unified nor hybrid)", cgroup.DefaultRoot)
	}
	name := fmt.Sprintf("kha-test-stopped-%d", os.Getpid())
	dir := filepath.Join(unified, name)
	_ = os.Remove(dir) // left by a crashed run of this process ID
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create a cgroup: %v", err)
	}
	a := sleeper(t)
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0)
		_ = a.Process.Kill()
		_, _ = a.Process.Wait()
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(a.Process.Pid)), 0); err != nil {
		t.Fatalf("move the sleeper into %s: %v", dir, err)
	}
	group := "/" + name
	if st, err := fs.Stopped(group); err != nil || st {
		t.Fatalf("running: Stopped = %v, %v; want false", st, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		t.Fatalf("freeze: %v", err)
	}
	waitStopped(t, fs, group, true)
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(a.Process.Pid) + "/stat")
	t.Logf("frozen sleeper's /proc stat: %s", strings.TrimSpace(string(stat)))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("0"), 0); err != nil {
		t.Fatalf("thaw: %v", err)
	}
	waitStopped(t, fs, group, false)
}

func waitStopped(t *testing.T, fs cgroup.FS, group string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := fs.Stopped(group)
		if err != nil {
			t.Fatalf("Stopped(%s): %v", group, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stopped(%s) = %v for 5 s, want %v", group, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitState waits until pid's /proc stat shows state.
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if procState(pid) == state {
			return
		}
	}
	t.Fatalf("process %d not in state %c after 5 s (%c)", pid, state, procState(pid))
}

func waitNotState(t *testing.T, pid int, state byte) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if procState(pid) != state {
			return
		}
	}
	t.Fatalf("process %d still in state %c after 5 s", pid, state)
}

func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return '?'
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return '?'
	}
	return b[i+2]
}

func signal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
}
