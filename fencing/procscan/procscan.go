// Package procscan finds processes of the managed components by reading a
// /proc tree: which executable each runs, its command line, parent, control
// group, and the login session it came from. The supervisor uses it to find
// copies started outside their systemd units (by hand, by another service
// manager), which the units' guard cannot see.
package procscan

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Proc is one process found.
type Proc struct {
	PID       int      `json:"pid"`
	PPID      int      `json:"ppid"`
	Exe       string   `json:"exe"`
	Cmdline   []string `json:"cmdline"`
	Cgroup    string   `json:"cgroup"`               // systemd's view: the v2 path, or v1's name=systemd hierarchy
	LoginUID  int      `json:"loginuid"`             // -1: not set (a daemon) or unknown
	SessionID int      `json:"session"`              // -1: none or unknown
	StartTime uint64   `json:"start_time,omitempty"` // clock ticks after boot: tells a reused PID apart
	// ExeFromCmdline: /proc/PID/exe could not be read, Exe is the command
	// line's first word.
	ExeFromCmdline bool `json:"exe_from_cmdline,omitempty"`
}

// Scanner reads one /proc tree.
type Scanner struct {
	Root string // "/proc" when empty
}

func (s Scanner) root() string {
	if s.Root == "" {
		return "/proc"
	}
	return s.Root
}

// Find returns the processes whose executable has one of the given base
// names (a full path is reduced to its base name, so a copy of the binary
// elsewhere is found too). Processes that vanish while being read, and
// kernel threads (no executable), are skipped.
func (s Scanner) Find(names []string) ([]Proc, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[path.Base(n)] = true
	}
	ents, err := os.ReadDir(s.root())
	if err != nil {
		return nil, fmt.Errorf("procscan: %w", err)
	}
	var out []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		exe, _, err := s.exe(pid)
		if err != nil || !want[path.Base(exe)] {
			continue
		}
		p, err := s.Read(pid)
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, p)
	}
	return out, nil
}

func (s Scanner) file(pid int, name string) string {
	return filepath.Join(s.root(), strconv.Itoa(pid), name)
}

// exe is the process's executable. Where /proc/PID/exe cannot be read (the
// kernel's ptrace access check refuses it to a caller whose capabilities do
// not cover the target's, as under the packaged unit's bounding set), it
// falls back to the command line's first word, which anyone may read:
// a scan that silently skipped such processes would be blind to exactly the
// root-started copies it exists for. fromCmdline says which was used. A
// process without exe (a kernel thread, a zombie) is an error.
func (s Scanner) exe(pid int) (exe string, fromCmdline bool, err error) {
	l, err := os.Readlink(s.file(pid, "exe"))
	if err == nil {
		return strings.TrimSuffix(l, " (deleted)"), false, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, err
	}
	b, cerr := os.ReadFile(s.file(pid, "cmdline"))
	argv0, _, _ := bytes.Cut(b, []byte{0})
	if cerr != nil || len(argv0) == 0 {
		return "", false, err
	}
	return string(argv0), true, nil
}

// Read reads what is known of one process.
func (s Scanner) Read(pid int) (Proc, error) {
	p := Proc{PID: pid, LoginUID: -1, SessionID: -1}
	var err error
	if p.Exe, p.ExeFromCmdline, err = s.exe(pid); err != nil {
		return p, err
	}
	stat, err := os.ReadFile(s.file(pid, "stat"))
	if err != nil {
		return p, err
	}
	if p.PPID, p.StartTime, err = parseStat(stat); err != nil {
		return p, fmt.Errorf("procscan: %d: %w", pid, err)
	}
	if b, err := os.ReadFile(s.file(pid, "cmdline")); err == nil {
		for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0}) {
			p.Cmdline = append(p.Cmdline, string(a))
		}
	}
	if b, err := os.ReadFile(s.file(pid, "cgroup")); err == nil {
		p.Cgroup = systemdCgroup(string(b))
	}
	p.LoginUID = readID(s.file(pid, "loginuid"))
	p.SessionID = readID(s.file(pid, "sessionid"))
	return p, nil
}

// Cgroup reads only pid's control group (systemd's view, as in Read): the
// one file a decision on a process just exec'd needs before acting.
func (s Scanner) Cgroup(pid int) (string, error) {
	b, err := os.ReadFile(s.file(pid, "cgroup"))
	if err != nil {
		return "", fmt.Errorf("procscan: %w", err)
	}
	return systemdCgroup(string(b)), nil
}

// parseStat takes the parent PID (field 4) and start time (field 22) from
// /proc/PID/stat; the command name (field 2) may hold spaces and ')'.
func parseStat(b []byte) (ppid int, start uint64, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("stat: too few fields")
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, fmt.Errorf("stat: ppid: %w", err)
	}
	if start, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stat: starttime: %w", err)
	}
	return ppid, start, nil
}

// systemdCgroup picks systemd's hierarchy from /proc/PID/cgroup: the v1
// name=systemd line when there is one (hybrid and legacy layouts), else
// the v2 "0::" line.
func systemdCgroup(s string) string {
	v2 := ""
	for _, line := range strings.Split(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "name=systemd":
			return parts[2]
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		}
	}
	return v2
}

// readID reads loginuid or sessionid; the kernel's "unset" (2^32-1) and
// anything unreadable are -1.
func readID(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || n == 1<<32-1 {
		return -1
	}
	return int(n)
}

// InUnit reports whether p runs inside the control group of one of units
// (or a sub-group of it): systemd names a unit's group after the unit.
func (p Proc) InUnit(units []string) bool {
	for _, seg := range strings.Split(p.Cgroup, "/") {
		for _, u := range units {
			if seg == u {
				return true
			}
		}
	}
	return false
}

// Same reports whether pid still is the process p (not a reused PID).
func (s Scanner) Same(p Proc) bool {
	q, err := s.Read(p.PID)
	return err == nil && q.StartTime == p.StartTime
}

// Signal sends sig to p unless its PID now belongs to another process.
// A process already gone is not an error.
func (s Scanner) Signal(p Proc, sig syscall.Signal) error {
	if !s.Same(p) {
		return nil
	}
	if err := syscall.Kill(p.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("procscan: signal %d (%s): %w", p.PID, sig, err)
	}
	return nil
}
