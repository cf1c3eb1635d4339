package execwatch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// copyOf writes a copy of /bin/sleep at dir/name.
func copyOf(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// started runs exe for 30 s and returns it and a channel that gets its
// exit.
func started(t *testing.T, exe string) (*exec.Cmd, chan error) {
	t.Helper()
	cmd := exec.Command(exe, "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, done
}

func next(t *testing.T, ch chan Exec, what string) Exec {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no exec event for %s within 10 s", what)
		return Exec{}
	}
}

// TestWatcherSeesExecs: with the real kernel, an exec of a watched file is
// handed on with its PID, under its own path, through a hard link (same
// file, other name: matched by identity) and as a copy under another
// directory with the same base name (matched by name); an exec of an
// unwatched program is not; Kill stops the process through its pidfd.
func TestWatcherSeesExecs(t *testing.T) {
	testenv.RequireRoot(t)
	w, err := Open()
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer w.Close()
	dir, other := t.TempDir(), t.TempDir()
	name := "kt-execwatch-" + strings.ReplaceAll(t.Name(), "/", "-")
	exe := copyOf(t, dir, name)
	id, err := Identify(exe)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "hardlink-other-name")
	if err := os.Link(exe, link); err != nil {
		t.Fatal(err)
	}
	cp := copyOf(t, other, name)
	unwatched := copyOf(t, other, "kt-execwatch-unwatched")
	w.SetMatch(Match{Names: map[string]bool{name: true}, Files: map[FileID]bool{id: true}})
	n, err := w.Mark([]string{exe})
	if err != nil || n < 1 {
		t.Fatalf("Mark: %d filesystems, %v", n, err)
	}
	t.Logf("%d filesystems marked; pidfds: %v", n, w.PIDFDs())
	ch := make(chan Exec, 16)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, ch, func() { t.Error("overflow") }) }()

	for _, tc := range []struct{ what, exe, wantPath string }{
		{"the file itself", exe, exe},
		{"a hard link under another name", link, link},
		{"a copy with the same base name", cp, cp},
	} {
		// Unwatched first: if it were handed on, it would come first.
		u, udone := started(t, unwatched)
		cmd, done := started(t, tc.exe)
		e := next(t, ch, tc.what)
		if e.PID != cmd.Process.Pid || e.Path != tc.wantPath {
			t.Fatalf("%s: event PID %d path %q, want PID %d (unwatched one: %d) path %q", tc.what, e.PID, e.Path, cmd.Process.Pid, u.Process.Pid, tc.wantPath)
		}
		if err := e.Kill(); err != nil {
			t.Fatal(err)
		}
		e.Close()
		select {
		case err := <-done:
			if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("%s: exited %v, want SIGKILL", tc.what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still running after Kill", tc.what)
		}
		_ = u.Process.Kill()
		<-udone
	}
	select {
	case e := <-ch:
		t.Fatalf("unexpected event: %+v", e)
	default:
	}
	cancel()
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestExecMounts: pseudo and noexec filesystems are left out, escapes
// undone.
func TestExecMounts(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	body := `22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:22 / /proc rw,nosuid,nodev,noexec shared:2 - proc proc rw
24 22 0:23 / /dev/shm rw,nosuid,nodev,noexec - tmpfs tmpfs rw
25 22 0:24 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
26 22 0:25 / /mnt/with\040space rw - xfs /dev/vdb rw
27 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
	if err := os.WriteFile(mi, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := execMounts(mi)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/", "/tmp", "/mnt/with space"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("execMounts = %q, want %q", got, want)
	}
}
