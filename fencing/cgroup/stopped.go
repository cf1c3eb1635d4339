package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stopped reports whether group's processes cannot run at all until someone
// resumes them: the cgroup v2 freezer holds the group (its cgroup.events says
// "frozen 1", as after `systemctl freeze`), or the group has a process and
// every thread of every process in it and its sub-groups is stopped (state T,
// as after SIGSTOP, or t, a debugger's stop). A group without a live process
// is not stopped, frozen or not: it is down, which the unit's state says.
// A process this reader cannot see (outside its PID namespace) is an error,
// not a guess: the caller falls back on other evidence. (A process gone from
// /proc counts as ended, as for the fence's kill: the daemon runs as root,
// which /proc's hidepid does not hide processes from.)
//
// It is a hint for the health probes, not a proof for the fence: a process
// that is only waiting (on a lock, on the network) is not stopped, and one
// that a debugger has stopped may be resumed the next instant.
func (f FS) Stopped(group string) (bool, error) {
	l, err := f.list(group)
	if err != nil {
		return false, err
	}
	if l.hidden > 0 {
		return false, fmt.Errorf("cgroup: %s has %d processes outside this PID namespace: cannot tell whether they run", group, l.hidden)
	}
	if len(l.pids) == 0 {
		return false, nil
	}
	dirs, _, err := f.dirs(group)
	if err != nil {
		return false, err
	}
	for _, d := range dirs {
		if frozen(filepath.Join(d, "cgroup.events")) {
			return true, nil
		}
	}
	seen := 0
	for _, pid := range l.pids {
		st, n, err := threadsStopped(pid)
		if err != nil {
			return false, err
		}
		if n == 0 {
			continue // ended since the group was read
		}
		if !st {
			return false, nil
		}
		seen++
	}
	return seen > 0, nil
}

// Exists reports whether group has a directory in any hierarchy.
func (f FS) Exists(group string) (bool, error) {
	dirs, _, err := f.dirs(group)
	return len(dirs) > 0, err
}

// frozen reads a cgroup v2 cgroup.events file: "frozen 1" once every
// process of the group is frozen. An absent file (cgroup v1, or a kernel
// before 5.2) is not frozen.
func frozen(events string) bool {
	fh, err := os.Open(events)
	if err != nil {
		return false
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "frozen 1" {
			return true
		}
	}
	return false
}

// threadsStopped reports whether every thread of pid is stopped (T or t),
// and how many threads it read; 0 when the process is gone.
func threadsStopped(pid int) (bool, int, error) {
	taskDir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(taskDir)
	if gone(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("cgroup: read %s: %w", taskDir, err)
	}
	n := 0
	for _, e := range ents {
		s, err := procState(filepath.Join(taskDir, e.Name(), "stat"))
		if gone(err) {
			continue // the thread ended
		}
		if err != nil {
			return false, 0, err
		}
		switch s {
		case 'T', 't':
			n++
		case 'Z', 'X':
			// an exited thread waiting to be reaped: it neither runs nor blocks
		default:
			return false, n + 1, nil
		}
	}
	return n > 0, n, nil
}

// procState is the state letter of a /proc/.../stat file: the field after
// the command name, which is in parentheses and may itself hold ") ".
func procState(path string) (byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("cgroup: %s: no state field in %q", path, b)
	}
	return b[i+2], nil
}
