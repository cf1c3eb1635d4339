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
	l, err := f.list(group)
	return l.pids, err
}

// listing is what one read of a group found: the live processes visible
// from here, and how many entries named a process outside this PID
// namespace (cgroup.procs lists those as 0).
type listing struct {
	pids   []int
	hidden int
}

func (f FS) list(group string) (listing, error) {
	dirs, _, err := f.dirs(group)
	if err != nil {
		return listing{}, err
	}
	seen := map[int]bool{}
	var l listing
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
			pids, hidden, err := readProcs(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return err
			}
			l.hidden += hidden
			for _, pid := range pids {
				if !seen[pid] && !exited(pid) {
					seen[pid] = true
					l.pids = append(l.pids, pid)
				}
			}
			return nil
		})
		if err != nil {
			return listing{}, fmt.Errorf("cgroup: read %s: %w", d, err)
		}
	}
	return l, nil
}

func readProcs(path string) (pids []int, hidden int, err error) {
	fh, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: bad PID %q", path, line)
		}
		if pid > 0 {
			pids = append(pids, pid)
		} else {
			hidden++ // 0: a process outside our PID namespace
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, syscall.ENODEV) {
		return nil, 0, err
	}
	return pids, hidden, nil
}

// exited reports whether pid has ended: gone from /proc, or a zombie
// waiting to be reaped. A process whose first thread exited while others
// run shows Z in its own stat (ps: Zl) and is alive: its threads decide.
func exited(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	st, err := procState(dir + "/stat")
	if err != nil {
		return gone(err)
	}
	if st != 'Z' && st != 'X' {
		return false
	}
	ents, err := os.ReadDir(dir + "/task")
	if err != nil {
		return gone(err)
	}
	for _, e := range ents {
		if ts, err := procState(dir + "/task/" + e.Name() + "/stat"); err == nil && ts != 'Z' && ts != 'X' {
			return false
		}
	}
	return true
}

// gone reports whether err from reading /proc says the process or thread
// no longer exists (ESRCH: it ended between the open and the read).
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
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
