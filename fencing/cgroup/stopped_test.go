package cgroup_test

import (
	"fmt"
	"os"
	"path/filepath"
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
	want("both running", false)
	signal(t, a.Process.Pid, syscall.SIGSTOP)
	want("one of two stopped", false)
	signal(t, b.Process.Pid, syscall.SIGSTOP)
	want("both stopped", true)
	signal(t, a.Process.Pid, syscall.SIGCONT)
	want("one resumed", false)
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

func signal(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, pid, err)
	}
}
