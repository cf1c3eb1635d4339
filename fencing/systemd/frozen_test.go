package systemd_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	osexec "os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/cgroup"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
)

// newPrivateSystemd connects to the container's systemd as the daemon
// does to the host's: over systemd's private socket, with the bus as the
// fallback and the container's cgroups for direct kills.
func newPrivateSystemd(t *testing.T, c *nspawn.Container) (*systemd.Units, *counter) {
	t.Helper()
	cnt := &counter{}
	lg := slog.New(&testHandler{t: t, cnt: cnt})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := systemd.Open(ctx, systemd.Options{
		Private:     c.Root() + systemd.PrivateSocket,
		PrivateConn: privateConn(c),
		Bus:         c.SystemBus(),
		CgroupRoot:  c.Root() + "/sys/fs/cgroup",
		FileRoot:    c.Root(),
		Log:         lg,
	})
	if err != nil {
		cancel()
		t.Fatalf("OpenSystemd: %v", err)
	}
	t.Cleanup(func() { s.Close(); cancel() })
	return s, cnt
}

// TestPrivateSocketIgnoresAFrozenBus: with dbus-daemon stopped (SIGSTOP), a
// unit can still be stopped and its state read, because the supervisor
// talks to PID 1 over its private socket.
func TestPrivateSocketIgnoresAFrozenBus(t *testing.T) {
	c := container(t)
	s, cnt := newPrivateSystemd(t, c)
	const u = "kt-sd-frozenbus.service"
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start: %v", err)
	}
	busPID := show(t, c, "dbus.service", "MainPID")
	exec(t, c, "kill", "-STOP", busPID)
	t.Cleanup(func() { exec(t, c, "kill", "-CONT", busPID) })
	start := time.Now()
	err := s.Stop(bg(t, 10*time.Second), u)
	took := time.Since(start)
	t.Logf("Stop with dbus-daemon (PID %s) frozen: %v after %s; %d warnings", busPID, err, took.Round(time.Millisecond), cnt.warn.Load())
	if err != nil {
		t.Fatalf("Stop with the bus frozen: %v", err)
	}
	if got := show(t, c, u, "ActiveState"); got != "inactive" {
		t.Fatalf("%s is %s after Stop", u, got)
	}
	if st := state(t, s, u); st.Running() {
		t.Fatalf("States with the bus frozen: %+v", st)
	}
}

// TestFenceKillsUnitsWithPID1Frozen: the container's systemd is stopped
// with SIGSTOP after the units started, so no stop job can run. Fence must
// still get every process of the units down within the stop budget, killing
// them from their cgroups, and confirm it by reading the cgroups again.
func TestFenceKillsUnitsWithPID1Frozen(t *testing.T) {
	c := container(t)
	s, _ := newPrivateSystemd(t, c)
	units := []string{"kt-sd-frozen1.service", "kt-sd-frozen2.service"}
	if err := fencing.StartAll(bg(t, time.Minute), s, units, timeouts); err != nil {
		t.Fatalf("StartAll: %v", err)
	}
	// The kernel's view, from the host: every process of both units.
	fs := cgroup.FS{Root: c.Root() + "/sys/fs/cgroup"}
	var pids []int
	waitFor(t, "three processes in the units' cgroups", 20*time.Second, func() bool {
		pids = nil
		for _, u := range units {
			p, err := fs.Procs("/system.slice/" + u)
			if err != nil {
				t.Fatalf("read cgroup of %s: %v", u, err)
			}
			pids = append(pids, p...)
		}
		return len(pids) == 3
	})
	if err := syscall.Kill(c.Leader(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = syscall.Kill(c.Leader(), syscall.SIGCONT)
		}
	}
	t.Cleanup(func() {
		thaw()
		for _, u := range units {
			resetFailed(c, u)
		}
	})
	fast := fencing.Timeouts{Start: 20 * time.Second, Stop: time.Second, KillGrace: time.Second}
	start := time.Now()
	err := fencing.Fence(bg(t, time.Minute), s, units, fast)
	took := time.Since(start)
	var alive []int
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil && !zombie(pid) {
			alive = append(alive, pid)
		}
	}
	t.Logf("Fence with PID 1 frozen: %v after %s (S_max %s); processes %v, alive after: %v", err, took.Round(time.Millisecond), fast.StopMax(), pids, alive)
	if err != nil {
		t.Fatalf("Fence with PID 1 frozen: %v", err)
	}
	if len(alive) > 0 {
		t.Fatalf("processes %v of the units survived the fence", alive)
	}
	if took > fast.StopMax()+500*time.Millisecond {
		t.Fatalf("Fence took %s, over S_max %s", took, fast.StopMax())
	}
	// PID 1 runs again. Whether Restart= brings a unit back is systemd's
	// event order on the thaw (the SIGCHLD of its SIGKILLed process or the
	// stop job queued on the socket first): 1 in 3-5 runs here it restarts
	// once. The product does not rely on either: the guard in the unit's
	// drop-in refuses that start on a fenced node, and the supervisor,
	// which exits after every fence, stops every managed unit when it
	// starts again. What this layer must do is stop it again, as then.
	thaw()
	waitFor(t, "systemd to answer again", 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := s.States(ctx, units)
		return err == nil
	})
	time.Sleep(time.Second)
	for _, u := range units {
		st := state(t, s, u)
		if !st.Running() {
			continue
		}
		t.Logf("%s is %+v after PID 1 thawed: restarted by Restart= before systemd read the queued stop; stopping it again", u, st)
		if err := s.Stop(bg(t, 10*time.Second), u); err != nil {
			t.Fatalf("stop %s after the thaw: %v", u, err)
		}
		if st := state(t, s, u); st.Running() {
			t.Fatalf("%s is %+v after a stop with PID 1 running again", u, st)
		}
	}
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	b, err := readStat(pid)
	if err != nil {
		return errors.Is(err, syscall.ENOENT)
	}
	return b == 'Z' || b == 'X'
}

func readStat(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2], nil
		}
	}
	return 0, errors.New("bad stat")
}

// privateDialEnv makes the test binary a helper that connects to systemd's
// private socket from inside the container's PID namespace and hands the
// connection back over fd 3: systemd refuses a peer whose PID it cannot see,
// which a process on the host is.
const privateDialEnv = "KHA_TEST_PRIVATE_DIAL"

func privateDialHelper(path string) int {
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	f, err := c.(*net.UnixConn).File()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	parent, err := net.FileConn(os.NewFile(3, "parent"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, _, err := parent.(*net.UnixConn).WriteMsgUnix([]byte{0}, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// privateConn connects to the container's private socket through the
// helper, run with nsenter in the container's PID namespace only.
func privateConn(c *nspawn.Container) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
		defer ours.Close()
		cmd := osexec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(c.Leader()), "-p", "--", os.Args[0])
		cmd.Env = append(os.Environ(), privateDialEnv+"="+c.Root()+systemd.PrivateSocket)
		cmd.ExtraFiles = []*os.File{theirs}
		out, err := cmd.CombinedOutput()
		theirs.Close()
		if err != nil {
			return nil, fmt.Errorf("private dial helper: %w: %s", err, out)
		}
		uc, err := net.FileConn(ours)
		if err != nil {
			return nil, err
		}
		defer uc.Close()
		buf, oob := make([]byte, 1), make([]byte, syscall.CmsgSpace(4))
		_, oobn, _, _, err := uc.(*net.UnixConn).ReadMsgUnix(buf, oob)
		if err != nil {
			return nil, err
		}
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return nil, fmt.Errorf("private dial helper: no descriptor (%v)", err)
		}
		got, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(got) != 1 {
			return nil, fmt.Errorf("private dial helper: no descriptor (%v)", err)
		}
		f := os.NewFile(uintptr(got[0]), "private")
		defer f.Close()
		return net.FileConn(f)
	}
}
