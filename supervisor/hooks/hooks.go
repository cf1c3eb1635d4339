// Package hooks runs the operator's transition hooks (on_promote, on_demote,
// on_fence) and writes the fencing environment file for the managed units.
//
// Hooks are argv vectors executed directly, never through a shell, so that a
// node name or a token can never be interpreted as shell syntax. Each runs
// synchronously in its own process group with a timeout; when it expires the
// whole group gets SIGTERM, then SIGKILL after a grace period, so that a hook
// cannot leave children behind that outlive the transition it belongs to.
package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Path is the search path hooks run with, and the one a bare argv[0] is
// looked up in. The daemon's own PATH is not inherited.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// EnvPrefix is the prefix every variable given to a hook must carry.
const EnvPrefix = "KHA_"

// Defaults for Runner.
const (
	DefaultKillGrace = 2 * time.Second
	DefaultOutputMax = 4 << 10
)

// Runner runs hooks. The zero value is ready to use.
type Runner struct {
	Logger    *slog.Logger  // default slog.Default()
	KillGrace time.Duration // SIGTERM to SIGKILL; default DefaultKillGrace
	OutputMax int           // bytes of combined output kept (the tail); default DefaultOutputMax
}

// Error describes a hook that did not succeed.
type Error struct {
	Hook     string   // the hook's name, e.g. on_promote
	Argv     []string // what was run
	ExitCode int      // -1 when killed by a signal or not started
	TimedOut bool     // the timeout expired and the process group was killed
	Output   string   // tail of combined stdout and stderr
	Err      error    // underlying error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hook %s (%s)", e.Hook, e.Argv[0])
	switch {
	case e.TimedOut:
		fmt.Fprintf(&b, " timed out (%v); its process group was killed", e.Err)
	case e.ExitCode > 0:
		fmt.Fprintf(&b, " failed with exit status %d", e.ExitCode)
	default:
		fmt.Fprintf(&b, " failed: %v", e.Err)
	}
	if out := strings.TrimSpace(e.Output); out != "" {
		fmt.Fprintf(&b, "; output: %s", oneLine(out))
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Run runs a hook with the default Runner. See Runner.Run.
func Run(ctx context.Context, name string, argv []string, env map[string]string, timeout time.Duration) error {
	return (&Runner{}).Run(ctx, name, argv, env, timeout)
}

// Run executes argv (argv[0] absolute, relative with a slash, or looked up
// in Path) with environment PATH=Path plus env, whose keys must start with
// KHA_. It returns when the hook's process group is gone: nil on exit status
// 0, an *Error otherwise. An empty argv is "no hook" and returns nil. The
// timeout, or ctx ending first, kills the group: SIGTERM, then SIGKILL after
// the grace period.
func (r *Runner) Run(ctx context.Context, name string, argv []string, env map[string]string, timeout time.Duration) error {
	if len(argv) == 0 {
		return nil
	}
	h := &hookRun{r: r, name: name, argv: argv, log: r.logger().With("hook", name, "argv", argv)}
	if timeout <= 0 {
		return h.fail(fmt.Errorf("timeout %v must be positive", timeout))
	}
	if err := ctx.Err(); err != nil {
		return h.fail(fmt.Errorf("not started: %w", err))
	}
	envv, err := buildEnv(env)
	if err != nil {
		return h.fail(err)
	}
	bin, err := lookPath(argv[0])
	if err != nil {
		return h.fail(err)
	}
	if err := h.start(bin, envv); err != nil {
		return h.fail(err)
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	waitErr, timedOut := h.wait(tctx, timeout)
	h.drain()
	return h.result(ctx, tctx, timeout, waitErr, timedOut)
}

// hookRun is one run of a hook, from its start to its result.
type hookRun struct {
	r        *Runner
	name     string
	argv     []string
	log      *slog.Logger
	cmd      *exec.Cmd
	pgid     int
	pr       *os.File
	tail     *tailBuffer
	readDone chan struct{}
	waited   chan error
	started  time.Time
}

func (h *hookRun) fail(err error) error {
	h.log.Error("hook not run", "err", err)
	return &Error{Hook: h.name, Argv: h.argv, ExitCode: -1, Err: err}
}

// start runs the hook in a process group of its own. Output goes to a pipe
// we own (not an io.Writer), so that cmd.Wait returns when the hook exits
// even if a child still holds the pipe; the reader drains until the group
// is gone.
func (h *hookRun) start(bin string, envv []string) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("output pipe: %w", err)
	}
	h.pr, h.tail, h.readDone = pr, &tailBuffer{max: h.r.outputMax()}, make(chan struct{})
	go func() {
		defer close(h.readDone)
		_, _ = h.tail.ReadFrom(pr)
	}()
	cmd := exec.Command(bin)
	cmd.Args = h.argv // argv[0] as the operator wrote it
	cmd.Env = envv
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	h.started = time.Now()
	err = cmd.Start()
	pw.Close() // the child holds its own copy
	if err != nil {
		pr.Close()
		<-h.readDone
		return fmt.Errorf("start: %w", err)
	}
	h.cmd, h.pgid = cmd, cmd.Process.Pid // Setpgid with Pgid 0: the group is named after the hook
	h.waited = make(chan error, 1)
	go func() { h.waited <- cmd.Wait() }()
	return nil
}

// wait waits for the hook to exit or tctx to end, and leaves nothing of its
// process group running either way.
func (h *hookRun) wait(tctx context.Context, timeout time.Duration) (waitErr error, timedOut bool) {
	select {
	case waitErr = <-h.waited:
		// The hook is done; anything it left running in its group is not
		// part of a synchronous hook.
		if groupRunning(h.pgid) {
			h.log.Warn("hook left processes behind; killing its process group", "pgid", h.pgid)
			h.r.killGroup(h.pgid)
		}
		return waitErr, false
	case <-tctx.Done():
		h.log.Warn("hook did not finish in time; killing its process group", "timeout", timeout, "pgid", h.pgid, "cause", context.Cause(tctx))
		h.r.killGroup(h.pgid)
		return <-h.waited, true
	}
}

// drain ends the output reader. Everyone in the group is gone, so the pipe
// is closed unless a process escaped into a group of its own; do not wait
// for such a one forever.
func (h *hookRun) drain() {
	select {
	case <-h.readDone:
	case <-time.After(h.r.killGrace()):
		h.pr.Close()
		<-h.readDone
	}
	h.pr.Close()
}

// result logs and returns how the hook ended.
func (h *hookRun) result(ctx, tctx context.Context, timeout time.Duration, waitErr error, timedOut bool) error {
	elapsed := time.Since(h.started)
	out := h.tail.String()
	if timedOut {
		cause := tctx.Err()
		if ctx.Err() != nil {
			cause = fmt.Errorf("cancelled: %w", ctx.Err())
		} else {
			cause = fmt.Errorf("after %v: %w", timeout, cause)
		}
		e := &Error{Hook: h.name, Argv: h.argv, ExitCode: exitCode(h.cmd), TimedOut: true, Output: out, Err: cause}
		h.log.Error("hook killed", "elapsed", elapsed, "output", out, "err", e)
		return e
	}
	if waitErr != nil {
		e := &Error{Hook: h.name, Argv: h.argv, ExitCode: exitCode(h.cmd), Output: out, Err: waitErr}
		h.log.Error("hook failed", "exit_code", e.ExitCode, "elapsed", elapsed, "output", out)
		return e
	}
	h.log.Info("hook succeeded", "elapsed", elapsed, "output", out)
	return nil
}

func (r *Runner) killGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGTERM)
	if waitGroupGone(pgid, r.killGrace()) {
		return
	}
	_ = unix.Kill(-pgid, unix.SIGKILL)
	if !waitGroupGone(pgid, r.killGrace()) {
		r.logger().Error("hook process group survived SIGKILL (uninterruptible sleep?)", "pgid", pgid)
	}
}

// groupRunning reports whether any process in group pgid can still run. The
// hook itself is reaped by cmd.Wait and orphans by their reaper; until then
// they are zombies, which run nothing and do not count.
func groupRunning(pgid int) bool {
	return unix.Kill(-pgid, 0) == nil && !onlyZombies(pgid)
}

func waitGroupGone(pgid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !groupRunning(pgid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onlyZombies reports whether every process in group pgid has exited and
// merely awaits reaping (an orphan whose reaper is slow). Those hold no
// resources and run no code, so the group counts as gone.
func onlyZombies(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[2] != fmt.Sprint(pgid) {
			continue
		}
		if f[0] != "Z" && f[0] != "X" {
			return false
		}
	}
	return true
}

func exitCode(cmd *exec.Cmd) int {
	if cmd.ProcessState == nil {
		return -1
	}
	return cmd.ProcessState.ExitCode() // -1 when killed by a signal
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

func (r *Runner) killGrace() time.Duration {
	if r.KillGrace > 0 {
		return r.KillGrace
	}
	return DefaultKillGrace
}

func (r *Runner) outputMax() int {
	if r.OutputMax > 0 {
		return r.OutputMax
	}
	return DefaultOutputMax
}

// buildEnv returns PATH plus env, sorted, refusing keys outside KHA_ and
// anything the kernel or a reader of the environment would mangle.
func buildEnv(env map[string]string) ([]string, error) {
	out := []string{"PATH=" + Path}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := env[k]
		if !strings.HasPrefix(k, EnvPrefix) || !validName(k) {
			return nil, fmt.Errorf("environment variable %q: hooks only get %s* variables with names of letters, digits and _", k, EnvPrefix)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("environment variable %s: value contains a NUL byte", k)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// lookPath resolves argv[0] against Path, not the daemon's PATH, so that the
// hook that runs is the one a root shell with the standard PATH would find.
func lookPath(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty program name")
	}
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(Path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found in %s", name, Path)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	return len(p), nil
}

func (t *tailBuffer) ReadFrom(f *os.File) (int64, error) {
	var n int64
	b := make([]byte, 4096)
	for {
		k, err := f.Read(b)
		if k > 0 {
			_, _ = t.Write(b[:k])
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.truncated {
		return "..." + string(t.buf)
	}
	return string(t.buf)
}

// oneLine folds output into one line for an error message.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " | ", "\n", " | ", "\r", " | ").Replace(s)
}
