// Package proc starts and stops the lab's long-running processes (etcd
// members) by PID file. A PID file holds the PID and the process start time
// (from /proc/PID/stat), so a PID recycled after a crash is never signalled:
// the lab ends only processes it can prove it started.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Spec describes a process to start detached from the caller.
type Spec struct {
	Argv    []string
	PIDFile string
	LogFile string // stdout and stderr, appended
	Dir     string // working directory; "" keeps the caller's
}

// ID identifies one process incarnation.
type ID struct {
	PID   int
	Start uint64 // start time in clock ticks after boot (field 22 of /proc/PID/stat)
}

// Start launches spec.Argv in its own session (so a terminal's SIGINT or the
// caller's exit does not reach it) and records it in spec.PIDFile. A live
// process already recorded there is an error: callers decide whether that
// means "already running" (see Running).
func Start(spec Spec) (ID, error) {
	if len(spec.Argv) == 0 {
		return ID{}, errors.New("proc: empty argv")
	}
	if id, ok := Running(spec.PIDFile); ok {
		return id, fmt.Errorf("proc: %s already running as PID %d", spec.PIDFile, id.PID)
	}
	for _, d := range []string{filepath.Dir(spec.PIDFile), filepath.Dir(spec.LogFile)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return ID{}, fmt.Errorf("proc: %w", err)
		}
	}
	log, err := os.OpenFile(spec.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return ID{}, fmt.Errorf("proc: open log: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return ID{}, fmt.Errorf("proc: start %s: %w", spec.Argv[0], err)
	}
	// Reap it if it ends while we live; after we exit, init does.
	go func() { _ = cmd.Wait() }()
	st, err := startTime(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		return ID{}, err
	}
	id := ID{PID: cmd.Process.Pid, Start: st}
	if err := writePIDFile(spec.PIDFile, id); err != nil {
		_ = cmd.Process.Kill()
		return ID{}, err
	}
	return id, nil
}

func writePIDFile(path string, id ID) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d %d\n", id.PID, id.Start), 0o644); err != nil {
		return fmt.Errorf("proc: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("proc: %w", err)
	}
	return nil
}

// Read parses a PID file.
func Read(path string) (ID, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ID{}, fmt.Errorf("proc: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return ID{}, fmt.Errorf("proc: %s: want \"PID START\", got %q", path, b)
	}
	pid, err1 := strconv.Atoi(f[0])
	st, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 1 {
		return ID{}, fmt.Errorf("proc: %s: malformed %q", path, b)
	}
	return ID{PID: pid, Start: st}, nil
}

// Alive reports whether the incarnation id still runs (a zombie does not).
func Alive(id ID) bool {
	state, st, err := stat(id.PID)
	return err == nil && st == id.Start && state != 'Z' && state != 'X'
}

// Running reads path and reports the process it names if it still runs.
func Running(path string) (ID, bool) {
	id, err := Read(path)
	if err != nil {
		return ID{}, false
	}
	return id, Alive(id)
}

// Signal sends sig to the process recorded in path, if it is still the same
// incarnation. It returns os.ErrProcessDone when it is not running.
func Signal(path string, sig syscall.Signal) error {
	id, ok := Running(path)
	if !ok {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(id.PID, sig); err != nil {
		return fmt.Errorf("proc: signal %d: %w", id.PID, err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL, waits until the
// process is gone and removes the PID file. A missing or stale PID file is
// not an error: the goal, nothing running, already holds.
func Stop(ctx context.Context, path string, grace time.Duration) error {
	id, ok := Running(path)
	if !ok {
		return removeStale(path)
	}
	_ = syscall.Kill(id.PID, syscall.SIGTERM)
	if !waitGone(ctx, id, grace) {
		_ = syscall.Kill(id.PID, syscall.SIGKILL)
		if !waitGone(ctx, id, 10*time.Second) {
			return fmt.Errorf("proc: PID %d (%s) survived SIGKILL", id.PID, path)
		}
	}
	return removeStale(path)
}

// Kill sends SIGKILL and waits until the process is gone.
func Kill(ctx context.Context, path string) error {
	id, ok := Running(path)
	if !ok {
		return removeStale(path)
	}
	_ = syscall.Kill(id.PID, syscall.SIGKILL)
	if !waitGone(ctx, id, 10*time.Second) {
		return fmt.Errorf("proc: PID %d (%s) survived SIGKILL", id.PID, path)
	}
	return removeStale(path)
}

// KillID ends a process found by other means (inside one of the lab's
// namespaces), by PID and start time.
func KillID(ctx context.Context, id ID) error {
	if !Alive(id) {
		return nil
	}
	_ = syscall.Kill(id.PID, syscall.SIGKILL)
	if !waitGone(ctx, id, 10*time.Second) {
		return fmt.Errorf("proc: PID %d survived SIGKILL", id.PID)
	}
	return nil
}

// Identify returns the incarnation ID of a running PID.
func Identify(pid int) (ID, error) {
	st, err := startTime(pid)
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, Start: st}, nil
}

func removeStale(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("proc: %w", err)
	}
	return nil
}

func waitGone(ctx context.Context, id ID, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for Alive(id) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func startTime(pid int) (uint64, error) {
	_, st, err := stat(pid)
	return st, err
}

// stat reads the state letter and start time of pid. The command name in
// field 2 may hold spaces and parentheses, so fields are counted after the
// last ')'.
func stat(pid int) (byte, uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("proc: %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("proc: malformed stat of %d", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); field 22 (starttime) is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("proc: malformed stat of %d", pid)
	}
	st, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("proc: stat of %d: %w", pid, err)
	}
	return f[0][0], st, nil
}
