// Package nspawn boots throw-away systemd-nspawn containers from the host's
// own root file system, for tests and the lab: real systemd as PID 1, with a
// volatile overlay so everything written inside vanishes on exit.
//
// Layout per container (Dir = BaseDir/<name>):
//
//	owner   "<pid> <starttime>" of the process that booted it; CleanupStale
//	        only touches containers whose owner is gone, so concurrent runs
//	        with the same prefix do not kill each other
//	netns   present when Boot created /run/netns/<name> itself
//	root/   read-only bind mount of the host's /
//	lab/    bound at /lab inside, unless Options.Lab names another directory
//
// Containers are not registered with machined (there is none on the host:
// systemd is not PID 1 there), so every process is tracked by PID.
package nspawn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BaseDir holds one directory per container.
const BaseDir = "/srv/kha-nspawn"

// Bind is one extra bind mount into the container.
type Bind struct {
	Host      string // absolute path on the host
	Container string // absolute path inside; "" = same as Host
	ReadOnly  bool
}

// Options configure Boot.
type Options struct {
	// Name is the machine name and, when Boot creates the network
	// namespace, its name too. It must be unique on the host; prefix it
	// with your area (e.g. "kt-sd-").
	Name string
	// NetNS is the path of an existing network namespace (for example
	// /run/netns/m1, created by the lab's topology). Empty: Boot creates
	// /run/netns/<Name> with only loopback (up) and deletes it on Shutdown.
	NetNS string
	// Lab is the host directory bound at /lab. Empty: Dir()/lab.
	Lab string
	// Binds are extra bind mounts.
	Binds []Bind
	// Log receives the container's console output and nspawn's messages.
	// May be nil.
	Log io.Writer
	// BootTimeout bounds Boot (default 90 s; the machine is shared and slow).
	BootTimeout time.Duration
	// Logger for progress; nil = slog.Default().
	Logger *slog.Logger
}

// Container is a booted container. Its methods are safe for concurrent use.
type Container struct {
	name    string
	dir     string
	netns   string
	cmd     *exec.Cmd
	leader  int
	exited  chan struct{} // closed when the nspawn process has been reaped
	waitErr error
	tail    *tailBuffer
	log     *slog.Logger

	shutdownOnce sync.Once
	shutdownErr  error
}

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]{0,30}$`)

// containerEnv is the environment of commands run inside: the host's
// environment (e.g. a test's PATH or NOTIFY_SOCKET) must not leak in.
var containerEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
	"SYSTEMD_PAGER=",
	"SYSTEMD_COLORS=0",
	"TERM=dumb",
}

// Boot creates the root bind mount (and the network namespace unless
// opts.NetNS is set), starts systemd-nspawn and returns once systemd inside
// reports "running" or "degraded". On failure everything it created is
// removed again.
func Boot(ctx context.Context, opts Options) (*Container, error) {
	if !nameRE.MatchString(opts.Name) {
		return nil, fmt.Errorf("nspawn: invalid machine name %q (letters, digits, '-', at most 31)", opts.Name)
	}
	if opts.BootTimeout == 0 {
		opts.BootTimeout = 90 * time.Second
	}
	lg := opts.Logger
	if lg == nil {
		lg = slog.Default()
	}
	c := &Container{
		name:   opts.Name,
		dir:    filepath.Join(BaseDir, opts.Name),
		netns:  opts.NetNS,
		exited: make(chan struct{}),
		tail:   &tailBuffer{max: 16 << 10},
		log:    lg.With("machine", opts.Name),
	}
	if _, err := os.Stat(c.dir); err == nil {
		// Never clean this up here: it may be a live container of another run.
		return nil, fmt.Errorf("nspawn: %s already exists (a live container of that name, or a leftover: call CleanupStale)", c.dir)
	}
	start := time.Now()
	if err := c.prepare(opts); err != nil {
		_ = c.cleanup() // logs what it could not remove
		return nil, err
	}
	if err := c.start(opts); err != nil {
		_ = c.cleanup() // logs what it could not remove
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, opts.BootTimeout)
	defer cancel()
	if err := c.waitBooted(bctx); err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = c.Shutdown(sctx)
		return nil, fmt.Errorf("nspawn %s: boot: %w; console tail:\n%s", c.name, err, c.tail.String())
	}
	c.log.Info("container booted", "leader", c.leader, "nspawn_pid", c.cmd.Process.Pid, "took", time.Since(start).Round(time.Millisecond))
	return c, nil
}

func (c *Container) prepare(opts Options) error {
	for _, d := range []string{c.rootDir(), filepath.Join(c.dir, "lab")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("nspawn: %w", err)
		}
	}
	// The owner record comes first, so a crash at any later step leaves
	// something CleanupStale recognises.
	if err := writeOwner(c.dir); err != nil {
		return err
	}
	if c.netns == "" {
		if _, err := os.Stat(filepath.Join("/run/netns", c.name)); err == nil {
			// Not ours: never mark it for deletion.
			return fmt.Errorf("nspawn: network namespace %s already exists", c.name)
		}
		// Marker before creation, for the same reason.
		if err := os.WriteFile(filepath.Join(c.dir, "netns"), []byte(c.name+"\n"), 0o644); err != nil {
			return fmt.Errorf("nspawn: %w", err)
		}
		if out, err := exec.Command("ip", "netns", "add", c.name).CombinedOutput(); err != nil {
			return fmt.Errorf("nspawn: ip netns add %s: %w: %s", c.name, err, bytes.TrimSpace(out))
		}
		if out, err := exec.Command("ip", "-n", c.name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			return fmt.Errorf("nspawn: lo up in %s: %w: %s", c.name, err, bytes.TrimSpace(out))
		}
		c.netns = filepath.Join("/run/netns", c.name)
	} else if _, err := os.Stat(c.netns); err != nil {
		return fmt.Errorf("nspawn: network namespace: %w", err)
	}
	// A plain (non-recursive) bind: only the root file system, none of the
	// host's /proc, /sys, /run, /tmp mounts, and read-only so nothing in the
	// container can write through to the host.
	if err := unix.Mount("/", c.rootDir(), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("nspawn: bind / at %s: %w", c.rootDir(), err)
	}
	if err := unix.Mount("", c.rootDir(), "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("nspawn: remount %s read-only: %w", c.rootDir(), err)
	}
	return nil
}

func (c *Container) start(opts Options) error {
	lab := opts.Lab
	if lab == "" {
		lab = filepath.Join(c.dir, "lab")
	}
	args := []string{
		"--quiet", "--register=no", "--link-journal=no", "--keep-unit",
		"--volatile=overlay",
		"-D", c.rootDir(), "-M", c.name,
		"--network-namespace-path=" + c.netns,
		"--bind=" + lab + ":/lab",
		// nspawn's own seccomp filter leaves fanotify out; the supervisor's
		// exec watch needs it (a master keeps CAP_SYS_ADMIN, nspawn's default).
		"--system-call-filter=fanotify_init fanotify_mark",
		// The supervisor's fence destroys the node's connections to etcd
		// (SOCK_DESTROY, etcd.reset_on_fence), which needs CAP_NET_ADMIN in
		// the master's network namespace (its own; nspawn drops the
		// capability by default).
		"--capability=CAP_NET_ADMIN",
	}
	for _, b := range opts.Binds {
		dst := b.Container
		if dst == "" {
			dst = b.Host
		}
		flag := "--bind="
		if b.ReadOnly {
			flag = "--bind-ro="
		}
		args = append(args, flag+b.Host+":"+dst)
	}
	args = append(args, "--boot")
	cmd := exec.Command("systemd-nspawn", args...)
	var out io.Writer = c.tail
	if opts.Log != nil {
		out = io.MultiWriter(c.tail, opts.Log)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Should anything inside inherit the output pipe, Wait must not hang
	// on it once systemd-nspawn itself has exited.
	cmd.WaitDelay = 10 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a ^C to the test does not reach it directly;
		// Shutdown stops it in order.
		Setpgid: true,
		// If the owner dies without Shutdown, the container powers off
		// instead of lingering; CleanupStale removes the mounts.
		Pdeathsig: syscall.SIGTERM,
	}
	c.log.Debug("starting systemd-nspawn", "args", args)
	// Pdeathsig fires when the forking *thread* exits, and Go may retire a
	// thread whose goroutine locked it (netns helpers do). So fork from a
	// goroutine that holds its thread until systemd-nspawn has exited.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("nspawn: start systemd-nspawn: %w", err)
	}
	c.cmd = cmd
	return nil
}

// waitBooted finds the container's PID 1 and polls its system state.
func (c *Container) waitBooted(ctx context.Context) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("systemd-nspawn exited: %v", c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%w (last system state %q, leader %d)", ctx.Err(), last, c.leader)
		case <-tick.C:
		}
		if c.leader == 0 {
			pid, err := findLeader(c.cmd.Process.Pid)
			if err != nil || pid == 0 {
				continue
			}
			c.leader = pid
		}
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, _ := c.Exec(ectx, "systemctl", "is-system-running")
		cancel()
		last = strings.TrimSpace(string(out))
		switch last {
		case "running":
			return nil
		case "degraded":
			failed, _ := c.Exec(ctx, "systemctl", "--failed", "--no-legend", "--plain")
			c.log.Warn("container degraded", "failed_units", strings.TrimSpace(string(failed)))
			return nil
		}
	}
}

// findLeader returns the PID of the systemd-nspawn process's child that runs
// in a new PID namespace (the container's PID 1), or 0 while there is none.
func findLeader(nspawnPID int) (int, error) {
	self, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0, err
	}
	for _, pid := range children(nspawnPID) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if err != nil || ns == self {
			continue // gone, or nspawn's outer helper still in our namespace
		}
		return pid, nil
	}
	return 0, nil
}

// children lists the PIDs whose parent is ppid, by reading /proc/*/stat.
func children(ppid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil {
			continue
		}
		if st.ppid == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// Name is the machine name.
func (c *Container) Name() string { return c.name }

// Dir is the container's directory on the host (BaseDir/<name>).
func (c *Container) Dir() string { return c.dir }

// NetNS is the path of the container's network namespace.
func (c *Container) NetNS() string { return c.netns }

// Leader is the PID of the container's PID 1 (its systemd) as seen from the
// host.
func (c *Container) Leader() int { return c.leader }

// PID is the PID of the systemd-nspawn process.
func (c *Container) PID() int { return c.cmd.Process.Pid }

// Root is the container's root as seen from the host, for reading and
// writing files inside (the volatile overlay makes /etc writable there).
func (c *Container) Root() string { return fmt.Sprintf("/proc/%d/root", c.leader) }

// SystemBus is a D-Bus address through which the host reaches the
// container's system bus (and so its systemd).
func (c *Container) SystemBus() string {
	return "unix:path=" + c.Root() + "/run/dbus/system_bus_socket"
}

// WriteFile writes a file inside the container, creating parent
// directories. rel is an absolute path inside the container.
func (c *Container) WriteFile(rel string, data []byte, perm os.FileMode) error {
	p := filepath.Join(c.Root(), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("nspawn %s: %w", c.name, err)
	}
	if err := os.WriteFile(p, data, perm); err != nil {
		return fmt.Errorf("nspawn %s: %w", c.name, err)
	}
	return nil
}

// Command returns a command that runs argv inside every namespace of the
// container (nsenter -a), with a clean environment, in its own process
// group; when ctx ends the whole group is killed.
func (c *Container) Command(ctx context.Context, argv ...string) *exec.Cmd {
	args := append([]string{"-t", strconv.Itoa(c.leader), "-a", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = containerEnv
	// nsenter forks to enter the PID namespace, so killing it alone would
	// leave the command running inside: cancel kills the process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Exec runs argv inside the container and returns its standard output. A
// non-zero exit is an error that carries the standard error; the output is
// returned as well (systemctl is-active prints its answer and exits 3).
func (c *Container) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	if c.leader == 0 {
		return nil, fmt.Errorf("nspawn %s: not booted", c.name)
	}
	cmd := c.Command(ctx, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("nspawn %s: %s: %w: %s", c.name, strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Exited is closed when the systemd-nspawn process has ended.
func (c *Container) Exited() <-chan struct{} { return c.exited }

// Shutdown powers the container off in order (SIGTERM to systemd-nspawn,
// which asks the container's systemd to halt), SIGKILLs it if that does not
// finish before ctx expires, then removes the root mount, the network
// namespace (if Boot created it) and the directory. It is idempotent.
func (c *Container) Shutdown(ctx context.Context) error {
	c.shutdownOnce.Do(func() { c.shutdownErr = c.shutdown(ctx) })
	return c.shutdownErr
}

func (c *Container) shutdown(ctx context.Context) error {
	start := time.Now()
	if c.cmd != nil {
		pid := c.cmd.Process.Pid
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-c.exited:
			case <-ctx.Done():
				c.log.Warn("container did not power off in time; SIGKILL", "nspawn_pid", pid, "leader", c.leader)
				// The leader first: it is PID 1 of its namespace, so the
				// kernel kills everything inside with it.
				if c.leader != 0 {
					_ = syscall.Kill(c.leader, syscall.SIGKILL)
				}
				_ = c.cmd.Process.Kill()
				select {
				case <-c.exited:
				case <-time.After(10 * time.Second):
					return fmt.Errorf("nspawn %s: systemd-nspawn (pid %d) survived SIGKILL", c.name, pid)
				}
			}
		}
	}
	err := c.cleanup()
	c.log.Info("container shut down", "took", time.Since(start).Round(time.Millisecond), "err", err)
	return err
}

// cleanup removes what prepare created. The nspawn process must be gone.
func (c *Container) cleanup() error {
	return removeDir(c.dir, c.log)
}

func (c *Container) rootDir() string { return filepath.Join(c.dir, "root") }

// removeDir unmounts everything under dir, deletes the network namespace
// named in dir/netns, and removes dir.
func removeDir(dir string, lg *slog.Logger) error {
	var errs []error
	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "netns")); err == nil {
		name := strings.TrimSpace(string(b))
		if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
			if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns delete %s: %w: %s", name, err, bytes.TrimSpace(out)))
			}
		}
	}
	if len(errs) == 0 {
		// Only after the unmount succeeded: RemoveAll on a still-mounted
		// root would be refused (read-only), but never risk it.
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		lg.Error("container cleanup incomplete", "dir", dir, "err", err)
		return fmt.Errorf("nspawn: clean up %s: %w", dir, err)
	}
	return nil
}

// unmountUnder unmounts every mount point at or below dir, deepest first.
func unmountUnder(dir string) error {
	for range 5 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for i := len(mps) - 1; i >= 0; i-- {
			if err := unix.Unmount(mps[i], 0); err != nil {
				// Busy (a process still has it as cwd or root): detach,
				// the kernel drops it when the last user goes.
				_ = unix.Unmount(mps[i], unix.MNT_DETACH)
			}
		}
	}
	mps, _ := mountsUnder(dir)
	if len(mps) > 0 {
		return fmt.Errorf("still mounted: %v", mps)
	}
	return nil
}

// mountsUnder lists mount points at or below dir in /proc/self/mountinfo
// order (parents before children).
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for space ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
