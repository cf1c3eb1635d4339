package nspawn

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CleanupStale removes leftovers of earlier runs whose machine names start
// with prefix: systemd-nspawn processes (killed by PID), mounts under
// BaseDir, network namespaces Boot created, and directories. A container
// whose owning process is still alive is left alone, so two test runs with
// the same prefix can run at once. It returns the names it cleaned.
func CleanupStale(prefix string) ([]string, error) {
	if prefix == "" {
		return nil, errors.New("nspawn: CleanupStale needs a non-empty prefix")
	}
	lg := slog.Default().With("prefix", prefix)
	procs := nspawnProcs()
	ents, err := os.ReadDir(BaseDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("nspawn: %w", err)
	}
	var cleaned []string
	var errs []error
	seen := map[string]bool{}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, prefix) {
			continue
		}
		seen[name] = true
		dir := filepath.Join(BaseDir, name)
		if ownerAlive(dir) {
			continue
		}
		lg.Warn("removing stale container", "machine", name)
		for _, pid := range procs[name] {
			if err := killTree(pid); err != nil {
				errs = append(errs, err)
			}
		}
		if err := removeDir(dir, lg); err != nil {
			errs = append(errs, err)
			continue
		}
		cleaned = append(cleaned, name)
	}
	// An nspawn process without a directory lost its owner's bookkeeping;
	// it is stale only if orphaned (reparented to PID 1).
	for name, pids := range procs {
		if seen[name] || !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, pid := range pids {
			if st, err := readStat(pid); err == nil && st.ppid == 1 {
				lg.Warn("killing orphaned systemd-nspawn", "machine", name, "pid", pid)
				if err := killTree(pid); err != nil {
					errs = append(errs, err)
				}
				cleaned = append(cleaned, name)
			}
		}
	}
	return cleaned, errors.Join(errs...)
}

// killTree stops one systemd-nspawn process: SIGTERM (orderly poweroff),
// then SIGKILL to it and to the container's PID 1.
func killTree(pid int) error {
	leader, _ := findLeader(pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if waitGone(pid, 15*time.Second) {
		return nil
	}
	if leader != 0 {
		_ = syscall.Kill(leader, syscall.SIGKILL)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if waitGone(pid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("nspawn: systemd-nspawn pid %d survived SIGKILL", pid)
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		st, err := readStat(pid)
		if err != nil || st.state == "Z" {
			// A zombie is dead; its parent (not us) reaps it.
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// nspawnProcs maps machine name to the PIDs of systemd-nspawn processes
// running it, read from /proc/*/cmdline.
func nspawnProcs() map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(argv[0]) != "systemd-nspawn" {
			continue
		}
		if name := machineArg(argv[1:]); name != "" {
			out[name] = append(out[name], pid)
		}
	}
	return out
}

// machineArg returns the value of -M/--machine in args.
func machineArg(args []string) string {
	for i, a := range args {
		switch {
		case (a == "-M" || a == "--machine") && i+1 < len(args):
			return args[i+1]
		case strings.HasPrefix(a, "--machine="):
			return strings.TrimPrefix(a, "--machine=")
		case strings.HasPrefix(a, "-M") && len(a) > 2:
			return a[2:]
		}
	}
	return ""
}

// writeOwner records this process (PID and start time, which together
// survive PID reuse) as the owner of dir.
func writeOwner(dir string) error {
	st, err := readStat(os.Getpid())
	if err != nil {
		return fmt.Errorf("nspawn: %w", err)
	}
	rec := fmt.Sprintf("%d %d\n", os.Getpid(), st.start)
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(rec), 0o644); err != nil {
		return fmt.Errorf("nspawn: %w", err)
	}
	return nil
}

// ownerAlive reports whether the process recorded in dir/owner still runs.
// A missing or unreadable record counts as dead: Boot writes it before
// creating anything else.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return false
	}
	st, err := readStat(pid)
	return err == nil && st.start == start && st.state != "Z"
}

type procStat struct {
	state string
	ppid  int
	start uint64 // starttime, clock ticks since boot
}

// readStat parses /proc/<pid>/stat. The command name may contain spaces
// and parentheses, so fields are counted from the last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: ppid: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: starttime: %w", pid, err)
	}
	return procStat{state: f[0], ppid: ppid, start: start}, nil
}
