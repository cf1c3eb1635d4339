package supervisor

import (
	"context"
	"fmt"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/procscan"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// StrayProcess is a managed component's process found running outside its
// unit (issue 13: a copy started by hand runs unchecked by the guard).
type StrayProcess struct {
	procscan.Proc
	// Unit is the managed unit whose ExecStart names this executable;
	// empty when the name came from units.processes.
	Unit   string    `json:"unit,omitempty"`
	Seen   time.Time `json:"seen"`
	Action string    `json:"action"` // "killed", "sigterm", "reported"
}

// genericExecutables are never looked for when derived from ExecStart: a
// unit whose ExecStart is a shell or a wrapper would make every shell on the
// node a "copy". Name the real executable in units.processes instead.
var genericExecutables = map[string]bool{
	"sh": true, "bash": true, "dash": true, "zsh": true, "busybox": true, "env": true,
	"sleep": true, "python": true, "python3": true, "perl": true, "nsenter": true, "sudo": true,
}

// strayScan is the state of the stray-process scanner goroutine.
type strayScan struct {
	proc    procscan.Scanner
	names   []string              // executable base names looked for
	paths   []string              // their full paths, for the exec watch's file identity
	unitOf  map[string]string     // executable base name -> unit (from ExecStart)
	pending map[int]procscan.Proc // SIGTERM sent, SIGKILL due at killAt
	killAt  map[int]time.Time     //
	seen    map[string]bool       // pid/starttime already reported
	warned  map[string]bool       // generic executables already warned about
	execAt  time.Time             // when names were last derived
}

// strayRescan is how often executables derived from ExecStart are read
// again (a daemon-reload may change them).
const strayRescan = time.Minute

// scanStrays looks for processes of the managed components outside their
// units on every unit poll, on the leader and on standbys alike, and acts
// by units.stray_policy. It runs on its own goroutine: the loop never
// waits for it.
func (s *Supervisor) scanStrays(bg context.Context) {
	st := &strayScan{pending: map[int]procscan.Proc{}, killAt: map[int]time.Time{}, seen: map[string]bool{}, warned: map[string]bool{}}
	// The kernel's exec events (execwatch.go) find a new copy at its exec;
	// the poll finds what ran before, and anything the events missed.
	ew := s.openExecWatch(bg)
	defer func() {
		if ew != nil {
			_ = ew.w.Close()
		}
	}()
	for {
		now := s.now()
		s.strayPass(bg, st, now)
		ew.update(s, st, now)
		if s.strayWait(bg, st, &ew) != nil {
			return
		}
	}
}

func (s *Supervisor) strayPass(bg context.Context, st *strayScan, now time.Time) {
	s.strayNames(bg, st, now)
	for pid, p := range st.pending {
		if now.Before(st.killAt[pid]) {
			continue
		}
		if st.proc.Same(p) {
			_ = st.proc.Signal(p, syscall.SIGKILL)
			s.log.Error("stray process ignored SIGTERM for units.stop_timeout; sent SIGKILL", "pid", pid)
		}
		delete(st.pending, pid)
		delete(st.killAt, pid)
	}
	if len(st.names) == 0 {
		return
	}
	found, err := st.proc.Find(st.names)
	if err != nil {
		s.log.Warn("cannot scan for stray processes", "err", err)
		return
	}
	var current []StrayProcess
	alive := map[string]bool{}
	for _, p := range found {
		if p.InUnit(s.cfg.Units.Managed) || p.PID == selfPID {
			continue
		}
		id := fmt.Sprintf("%d/%d", p.PID, p.StartTime)
		alive[id] = true
		sp := StrayProcess{Proc: p, Unit: st.unitOf[path.Base(p.Exe)], Seen: now, Action: "reported"}
		if s.cfg.Units.StrayPolicy == config.StrayKill {
			sp.Action = "sigterm"
		}
		current = append(current, sp)
		if st.seen[id] {
			continue
		}
		st.seen[id] = true
		s.strayFound(st, sp, now)
	}
	for id := range st.seen {
		if !alive[id] {
			delete(st.seen, id)
		}
	}
	s.snap.mu.Lock()
	s.snap.st.Strays = current
	s.snap.mu.Unlock()
}

// strayFound reports one newly found process and, under the kill policy,
// sends SIGTERM with SIGKILL to follow after units.stop_timeout.
func (s *Supervisor) strayFound(st *strayScan, sp StrayProcess, now time.Time) {
	p := sp.Proc
	s.log.Error("process of a managed component running outside its unit",
		"pid", p.PID, "ppid", p.PPID, "exe", p.Exe, "cmdline", strings.Join(p.Cmdline, " "),
		"cgroup", p.Cgroup, "loginuid", p.LoginUID, "session", p.SessionID, "policy", s.cfg.Units.StrayPolicy,
		"exe_from_cmdline", p.ExeFromCmdline)
	s.snap.mu.Lock()
	s.snap.st.StrayProcesses++
	state := s.snap.st.State
	s.snap.mu.Unlock()
	action := "reported (units.stray_policy = report)"
	if s.cfg.Units.StrayPolicy == config.StrayKill {
		if err := st.proc.Signal(p, syscall.SIGTERM); err != nil {
			s.log.Error("cannot stop stray process", "pid", p.PID, "err", err)
		}
		st.pending[p.PID] = p
		st.killAt[p.PID] = now.Add(s.cfg.Units.StopTimeout)
		action = "SIGTERM sent, SIGKILL after units.stop_timeout"
	}
	s.recordHistory(group.Event{At: now, Node: s.cfg.Node, From: state, To: state, Kind: "rogue_process",
		Reason: fmt.Sprintf("pid %d (%s, parent %d, loginuid %d, session %d) outside its unit: %s", p.PID, strings.Join(p.Cmdline, " "), p.PPID, p.LoginUID, p.SessionID, action)})
}

// strayNames decides what to look for: units.processes, or else the
// executables of the units' ExecStart, read again every strayRescan.
func (s *Supervisor) strayNames(bg context.Context, st *strayScan, now time.Time) {
	if len(s.cfg.Units.Processes) > 0 {
		if st.names == nil {
			for _, p := range s.cfg.Units.Processes {
				st.names = append(st.names, path.Base(p))
			}
			st.paths = s.cfg.Units.Processes
		}
		return
	}
	er, ok := s.units.(fencing.ExecReader)
	if !ok || (!st.execAt.IsZero() && now.Sub(st.execAt) < strayRescan) {
		return
	}
	ctx, cancel := context.WithTimeout(bg, s.cfg.Units.PollInterval)
	defer cancel()
	execs, err := er.Executables(ctx, s.cfg.Units.Managed)
	if err != nil {
		s.log.Warn("cannot read the managed units' executables; not looking for stray copies yet", "err", err)
		return
	}
	st.execAt = now
	var names, paths []string
	st.unitOf = map[string]string{}
	for unit, paths := range execs {
		for _, p := range paths {
			if b := path.Base(p); genericExecutables[b] {
				if st.warned[p] {
					continue
				}
				st.warned[p] = true
				s.log.Warn("not looking for stray copies of a generic executable; name the component in units.processes", "unit", unit, "exe", p)
			} else {
				names = append(names, b)
				paths = append(paths, p)
				st.unitOf[b] = unit
			}
		}
	}
	st.names, st.paths = names, paths
}

var selfPID = syscall.Getpid()
