package procscan_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/procscan"
)

// fakeProc writes one process into a fake /proc tree.
func fakeProc(t *testing.T, root string, pid int, exe, stat, cmdline, cgroup, loginuid, session string) {
	t.Helper()
	d := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if exe != "" {
		if err := os.Symlink(exe, filepath.Join(d, "exe")); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"stat": stat, "cmdline": cmdline, "cgroup": cgroup, "loginuid": loginuid, "sessionid": session} {
		if body == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func stat(pid, ppid int, comm string) string {
	// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime
	return strconv.Itoa(pid) + " (" + comm + ") S " + strconv.Itoa(ppid) + " 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0"
}

func TestFindOnAFakeTree(t *testing.T) {
	root := t.TempDir()
	const unified = "0::/system.slice/kube-scheduler.service\n"
	// In its unit (cgroup v2).
	fakeProc(t, root, 100, "/usr/local/bin/kube-scheduler", stat(100, 1, "kube-scheduler"), "/usr/local/bin/kube-scheduler\x00--v=2\x00", unified, "4294967295", "4294967295")
	// Started by hand from a login session, a copy elsewhere, hybrid v1 layout; comm with a space and ')'.
	fakeProc(t, root, 200, "/tmp/kube-scheduler (deleted)", stat(200, 150, "kube sch)eduler"), "./kube-scheduler\x00", "1:name=systemd:/user.slice/user-1000.slice/session-7.scope\n0::/user.slice\n", "1000", "7")
	// Something else, and a kernel thread without exe.
	fakeProc(t, root, 300, "/usr/bin/bash", stat(300, 1, "bash"), "bash\x00", unified, "", "")
	fakeProc(t, root, 2, "", stat(2, 0, "kthreadd"), "", "", "", "")
	ps, err := procscan.Scanner{Root: root}.Find([]string{"/usr/local/bin/kube-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("found %+v, want PIDs 100 and 200", ps)
	}
	units := []string{"kube-scheduler.service"}
	for _, p := range ps {
		switch p.PID {
		case 100:
			if !p.InUnit(units) || p.LoginUID != -1 || p.SessionID != -1 || p.PPID != 1 || p.StartTime != 4242 {
				t.Errorf("unit process read as %+v", p)
			}
		case 200:
			if p.InUnit(units) || p.LoginUID != 1000 || p.SessionID != 7 || p.PPID != 150 ||
				p.Exe != "/tmp/kube-scheduler" || strings.Join(p.Cmdline, " ") != "./kube-scheduler" ||
				p.Cgroup != "/user.slice/user-1000.slice/session-7.scope" {
				t.Errorf("stray read as %+v", p)
			}
		default:
			t.Errorf("unexpected %+v", p)
		}
	}
}

func TestMissingProcIsAnError(t *testing.T) {
	if _, err := (procscan.Scanner{Root: filepath.Join(t.TempDir(), "none")}).Find([]string{"x"}); err == nil {
		t.Fatal("Find on a missing /proc succeeded")
	}
}

// TestFindsARealCopy: a copy of sleep under a managed component's name,
// started outside any unit, is found on the real /proc with our PID as its
// parent, and the signal reaches it.
func TestFindsARealCopy(t *testing.T) {
	name := "kt-procscan-" + strconv.Itoa(os.Getpid()) + "-kube-scheduler"
	exe := filepath.Join(t.TempDir(), name)
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := procscan.Scanner{}
	var ps []procscan.Proc
	deadline := time.Now().Add(10 * time.Second)
	for len(ps) == 0 && time.Now().Before(deadline) {
		if ps, err = s.Find([]string{"/usr/bin/" + name}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(ps) != 1 || ps[0].PID != cmd.Process.Pid || ps[0].PPID != os.Getpid() || ps[0].Exe != exe || ps[0].InUnit([]string{"kube-scheduler.service"}) {
		t.Fatalf("found %+v, want PID %d with parent %d running %s outside the unit", ps, cmd.Process.Pid, os.Getpid(), exe)
	}
	if err := s.Signal(ps[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("copy ended with %v, want terminated", err)
	}
	if s.Same(ps[0]) {
		t.Fatal("Same reports a process that has exited")
	}
}

// Where /proc/PID/exe cannot be read (under the packaged unit's capability
// bounding set the kernel refuses it for processes with more capabilities),
// the command line's first word names the executable: the scan must not go
// blind to root-started copies.
func TestFindFallsBackToTheCommandLine(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 400, "", stat(400, 1, "kube-scheduler"), "/opt/k8s/kube-scheduler\x00--v=2\x00", "0::/user.slice\n", "0", "3")
	// An exe that readlink refuses (EINVAL here; EACCES on a real /proc).
	if err := os.WriteFile(filepath.Join(root, "400", "exe"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := procscan.Scanner{Root: root}.Find([]string{"kube-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].PID != 400 || ps[0].Exe != "/opt/k8s/kube-scheduler" || !ps[0].ExeFromCmdline {
		t.Fatalf("found %+v, want PID 400 named by its command line", ps)
	}
}

// TestCgroupAlone: Cgroup reads systemd's view of one process's control
// group, as Read does, and fails for a process that is gone.
func TestCgroupAlone(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 42, "/usr/bin/kube-scheduler", stat(42, 1, "kube-scheduler"), "kube-scheduler\x00", "0::/system.slice/kube-scheduler.service\n", "", "")
	s := procscan.Scanner{Root: root}
	cg, err := s.Cgroup(42)
	if err != nil || cg != "/system.slice/kube-scheduler.service" {
		t.Fatalf("Cgroup(42) = %q, %v", cg, err)
	}
	if p, _ := s.Read(42); p.Cgroup != cg {
		t.Fatalf("Read's cgroup %q, Cgroup's %q", p.Cgroup, cg)
	}
	if _, err := s.Cgroup(43); err == nil {
		t.Fatal("Cgroup of a missing process: no error")
	}
}
