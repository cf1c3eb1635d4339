// Package cgroup kills a systemd unit's processes without asking systemd:
// it reads the unit's control group from the cgroup filesystem, sends
// SIGKILL to every process in it and in its sub-groups, and confirms by
// reading the group again. It is the fence's last resort when the service
// manager does not answer (PID 1 hung, its bus stuck): the kernel's view of
// who is in the group needs nobody's cooperation.
//
// Both layouts are handled: cgroup v2 (the unified hierarchy mounted at the
// root) and v1/hybrid, where systemd keeps its own named hierarchy under
// "systemd" (and, hybrid, a unified one under "unified"). Every hierarchy
// that has the group is read, so a process is found whichever one lists it.
package cgroup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultRoot is where the cgroup filesystem is mounted.
const DefaultRoot = "/sys/fs/cgroup"

// FS is a cgroup filesystem as seen from this process.
type FS struct {
	// Root is the mount point, DefaultRoot when empty. A container's
	// groups are reachable as /proc/PID/root/sys/fs/cgroup; cgroup.procs
	// lists PIDs in the reader's PID namespace, so they can be killed
	// from here.
	Root string
}

func (f FS) root() string {
	if f.Root == "" {
		return DefaultRoot
	}
	return f.Root
}

// hierarchies are the directories under Root that may hold systemd's
// groups: the root itself (v2), systemd's named v1 hierarchy and the
// hybrid layout's unified one.
func (f FS) hierarchies() []string {
	r := f.root()
	return []string{r, filepath.Join(r, "systemd"), filepath.Join(r, "unified")}
}

// dirs lists the existing directories of group (a path such as
// "/system.slice/kube-scheduler.service", systemd's ControlGroup) in every
// hierarchy. ok is false when no hierarchy is readable at all: then
// nothing can be confirmed, which is different from "the group is gone".
func (f FS) dirs(group string) (dirs []string, ok bool, err error) {
	if group == "" || group == "/" || strings.Contains(group, "..") {
		return nil, false, fmt.Errorf("cgroup: refusing group %q", group)
	}
	for _, h := range f.hierarchies() {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue // not a cgroup hierarchy here
		}
		ok = true
		d := filepath.Join(h, filepath.FromSlash(group))
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	if !ok {
		return nil, false, fmt.Errorf("cgroup: no cgroup hierarchy under %s", f.root())
	}
	return dirs, true, nil
}

// Procs returns the live processes in group and its sub-groups. A group
// that does not exist has none (systemd removes it once the unit is down).
// Zombies are not listed by the kernel once they have no live thread, so
// a killed process counts as gone even while its parent (PID 1) has not
// reaped it.
func (f FS) Procs(group string) ([]int, error) {
	dirs, _, err := f.dirs(group)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // removed while we walked
				}
				return err
			}
			if !e.IsDir() {
				return nil
			}
			pids, err := readProcs(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return err
			}
			for _, pid := range pids {
				if !seen[pid] && !zombie(pid) {
					seen[pid] = true
					out = append(out, pid)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("cgroup: read %s: %w", d, err)
		}
	}
	return out, nil
}

func readProcs(path string) ([]int, error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var pids []int
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("%s: bad PID %q", path, line)
		}
		if pid > 0 { // 0: a process outside our PID namespace
			pids = append(pids, pid)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, syscall.ENODEV) {
		return nil, err
	}
	return pids, nil
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist) // gone altogether
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// KillOnce sends SIGKILL to every process in group once (and writes
// cgroup.kill where the kernel has it, which also catches processes forked
// during the walk). It returns how many processes it signalled.
func (f FS) KillOnce(group string) (int, error) {
	dirs, _, err := f.dirs(group)
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		// cgroup v2, Linux 5.14+: kills the whole subtree atomically.
		_ = os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0)
	}
	pids, err := f.Procs(group)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			n++
		} else if !errors.Is(err, syscall.ESRCH) {
			return n, fmt.Errorf("cgroup: SIGKILL %d in %s: %w", pid, group, err)
		}
	}
	return n, nil
}

// Kill sends SIGKILL to every process in group until a read of the group
// finds none, or ctx ends (then the error names what is left). Killing
// again on every round catches processes forked in between.
func (f FS) Kill(ctx context.Context, group string) error {
	for {
		if _, err := f.KillOnce(group); err != nil {
			return err
		}
		left, err := f.Procs(group)
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cgroup: %s still has processes %v after SIGKILL: %w", group, left, ctx.Err())
		}
	}
}
