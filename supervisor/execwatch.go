package supervisor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/fencing/execwatch"
	"github.com/kha-supervisor/kha-supervisor/fencing/procscan"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// ExecWatchStatus says whether the stray scan learns of new processes from
// the kernel at their exec (issue 19) or only from its /proc poll.
type ExecWatchStatus struct {
	// Mode: "kernel" (fanotify exec events, the poll as backstop), "poll"
	// (the kernel mechanism is unavailable: copies live up to a poll
	// interval) or "off" (units.exec_watch = false).
	Mode        string `json:"mode"`
	Reason      string `json:"reason,omitempty"` // why not "kernel"
	Filesystems int    `json:"filesystems,omitempty"`
	Overflows   int64  `json:"overflows,omitempty"`
	// Kills: copies stopped at their exec; LastExecToKill: the last one's
	// time from its start (/proc/PID/stat starttime, 10 ms resolution) to
	// the SIGKILL.
	Kills          int64         `json:"kills,omitempty"`
	LastExecToKill time.Duration `json:"last_exec_to_kill_ns,omitempty"`
}

// execWatch feeds the stray scan with the kernel's exec events. The kill
// itself is decided on the watch's own goroutine (strayAtExec), so that a
// scan pass or a slow D-Bus read on the scanner's goroutine never delays
// it; the scanner only reports what was done.
type execWatch struct {
	w        *execwatch.Watcher
	execs    chan execStray
	overflow chan struct{}
	failed   chan error
	markedAt time.Time
}

// execStray is one exec of a managed executable outside the managed units,
// and what was done about it at once.
type execStray struct {
	e      execwatch.Exec
	p      procscan.Proc
	killed bool
	took   time.Duration // from the process's start to the SIGKILL
	err    error
}

// openExecWatch starts the exec watch, or says loudly why the scan polls
// only; nil then.
func (s *Supervisor) openExecWatch(bg context.Context) *execWatch {
	if !s.cfg.Units.ExecWatch {
		s.setExecWatch(func(x *ExecWatchStatus) { x.Mode, x.Reason = "off", "units.exec_watch = false" })
		return nil
	}
	w, err := execwatch.Open()
	if err != nil {
		s.execWatchDown(err)
		return nil
	}
	ew := &execWatch{w: w, execs: make(chan execStray, 64), overflow: make(chan struct{}, 1), failed: make(chan error, 1)}
	raw := make(chan execwatch.Exec, 64)
	go func() {
		ew.failed <- w.Run(bg, raw, func() {
			select {
			case ew.overflow <- struct{}{}:
			default:
			}
		})
	}()
	go func() {
		for {
			select {
			case e := <-raw:
				if x, ok := s.strayAtExec(e); ok {
					select {
					case ew.execs <- x:
					case <-bg.Done():
						return
					}
				}
			case <-bg.Done():
				return
			}
		}
	}()
	s.setExecWatch(func(x *ExecWatchStatus) { x.Mode, x.Reason = "kernel", "" })
	return ew
}

// execWatchDown logs, once per cause, that copies are found by the poll
// only, and says so in status (and so in kha_exec_watch).
func (s *Supervisor) execWatchDown(err error) {
	s.log.Error("cannot watch execs through the kernel; copies of managed components started outside their units are found by the /proc poll only, up to units.poll_interval after they start",
		"err", err, "poll_interval", s.cfg.Units.PollInterval)
	s.setExecWatch(func(x *ExecWatchStatus) { x.Mode, x.Reason = "poll", err.Error() })
}

func (s *Supervisor) setExecWatch(f func(*ExecWatchStatus)) {
	s.snap.mu.Lock()
	defer s.snap.mu.Unlock()
	x := ExecWatchStatus{}
	if s.snap.st.ExecWatch != nil {
		x = *s.snap.st.ExecWatch
	}
	f(&x)
	s.snap.st.ExecWatch = &x
}

// update points the watch at what the scan looks for: the base names, and
// the files themselves (read again on every pass: an upgrade replaces the
// file). Filesystems are marked again every strayRescan, for new mounts.
func (ew *execWatch) update(s *Supervisor, st *strayScan, now time.Time) {
	if ew == nil {
		return
	}
	m := execwatch.Match{Names: map[string]bool{}, Files: map[execwatch.FileID]bool{}}
	var paths []string
	for _, n := range st.names {
		m.Names[n] = true
	}
	for _, p := range st.paths {
		if id, err := execwatch.Identify(p); err == nil {
			m.Files[id] = true
			paths = append(paths, p)
		}
	}
	ew.w.SetMatch(m)
	if !ew.markedAt.IsZero() && now.Sub(ew.markedAt) < strayRescan {
		return
	}
	ew.markedAt = now
	n, err := ew.w.Mark(paths)
	if err != nil {
		s.log.Warn("cannot watch execs on the filesystem of a managed executable; the /proc poll still finds its copies", "err", err)
	}
	s.setExecWatch(func(x *ExecWatchStatus) { x.Filesystems = n })
}

// strayWait sleeps one poll interval, handling exec events meanwhile. It
// returns early (nil) after an overflow so that the full scan runs at once,
// and ctx's error when the supervisor stops.
func (s *Supervisor) strayWait(bg context.Context, st *strayScan, ew **execWatch) error {
	t := time.NewTimer(s.cfg.Units.PollInterval)
	defer t.Stop()
	for {
		var execs chan execStray
		var overflow chan struct{}
		var failed chan error
		if *ew != nil {
			execs, overflow, failed = (*ew).execs, (*ew).overflow, (*ew).failed
		}
		select {
		case <-bg.Done():
			return bg.Err()
		case <-t.C:
			return nil
		case e := <-execs:
			s.strayExec(st, e)
		case <-overflow:
			s.log.Error("the kernel's exec event queue overflowed; scanning /proc at once", "err", execwatch.ErrOverflow)
			s.setExecWatch(func(x *ExecWatchStatus) { x.Overflows++ })
			return nil
		case err := <-failed:
			if err == nil {
				err = errors.New("the exec watch stopped")
			}
			_ = (*ew).w.Close()
			*ew = nil
			s.execWatchDown(err)
		}
	}
}

// strayAtExec decides on one exec of a managed executable, on the watch's
// goroutine: outside the managed units it is a stray, found at its exec,
// and under the kill policy it gets SIGKILL at once (it has run nothing
// yet, there is nothing to shut down gracefully; a scheduler needs hundreds
// of milliseconds to sync its caches before it could bind a pod). Only
// the configuration is read here, never the scanner's state.
func (s *Supervisor) strayAtExec(e execwatch.Exec) (execStray, bool) {
	defer e.Close()
	// The control group alone decides: one read before the kill, the rest
	// of the report after it.
	cg, err := procscan.Scanner{}.Cgroup(e.PID)
	if err != nil || e.PID == selfPID || (procscan.Proc{Cgroup: cg}).InUnit(s.cfg.Units.Managed) {
		return execStray{}, false // gone already, or a unit's own start
	}
	x := execStray{e: e}
	if s.cfg.Units.StrayPolicy == config.StrayKill {
		x.err, x.killed = e.Kill(), true
	}
	p, err := procscan.Scanner{}.Read(e.PID) // a zombie still has its stat
	if err != nil {
		p = procscan.Proc{PID: e.PID, PPID: -1, LoginUID: -1, SessionID: -1}
	}
	if x.killed && p.StartTime != 0 {
		x.took = sinceStart(p.StartTime) // unknown (0) when /proc no longer had it
	}
	// The event comes from inside execve: /proc may still show the
	// previous program.
	p.Exe, p.ExeFromCmdline, p.Cgroup = e.Path, false, cg
	x.p = p
	return x, true
}

// strayExec reports one stray found at its exec, on the scanner's
// goroutine: logged, counted, recorded, as the poll's strays are.
func (s *Supervisor) strayExec(st *strayScan, x execStray) {
	p, e := x.p, x.e
	id := fmt.Sprintf("%d/%d", p.PID, p.StartTime)
	if st.seen[id] {
		return
	}
	st.seen[id] = true
	action := "reported at exec (units.stray_policy = report)"
	if x.killed {
		if x.err != nil {
			s.log.Error("cannot kill stray process", "pid", p.PID, "err", x.err)
		}
		action = "SIGKILL at exec (its start time was gone from /proc)"
		if x.took > 0 {
			action = fmt.Sprintf("SIGKILL at exec, %s after it started", x.took.Round(time.Millisecond))
		}
		s.setExecWatch(func(w *ExecWatchStatus) {
			w.Kills++
			if x.took > 0 {
				w.LastExecToKill = x.took
			}
		})
	}
	s.log.Error("process of a managed component started outside its unit",
		"pid", p.PID, "ppid", p.PPID, "exe", e.Path, "unit", st.unitOf[path.Base(e.Path)], "cmdline", strings.Join(p.Cmdline, " "),
		"cgroup", p.Cgroup, "loginuid", p.LoginUID, "session", p.SessionID, "policy", s.cfg.Units.StrayPolicy,
		"action", action, "seen_by", "exec")
	s.snap.mu.Lock()
	s.snap.st.StrayProcesses++
	state := s.snap.st.State
	s.snap.mu.Unlock()
	s.recordHistory(group.Event{At: e.Seen, Node: s.cfg.Node, From: state, To: state, Kind: "rogue_process",
		Reason: fmt.Sprintf("pid %d (exec of %s, parent %d, loginuid %d, session %d) outside its unit: %s", p.PID, e.Path, p.PPID, p.LoginUID, p.SessionID, action)})
}

// sinceStart is how long ago a process started, from its /proc/PID/stat
// starttime (clock ticks after boot, USER_HZ = 100) and CLOCK_BOOTTIME.
func sinceStart(start uint64) time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano()) - time.Duration(start)*10*time.Millisecond
}
