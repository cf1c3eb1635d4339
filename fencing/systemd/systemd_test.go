package systemd_test

// Tests of fencing.Systemd against a real systemd (252 on Debian 12) in a
// systemd-nspawn container booted once per package run. The host talks to
// the container's systemd over its system bus (Container.SystemBus), exactly
// as the supervisor talks to the host's.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

const ctPrefix = "kt-sd-"

// Test units. Each test uses its own, so tests cannot disturb each other
// through state left behind.
var testUnits = map[string]string{
	// kt-sd-1 takes 0.3 s to become active; kt-sd-2 is ordered after it
	// (After=): StartAll starts both at once and systemd keeps the order.
	"kt-sd-1.service": "[Service]\nExecStartPre=/bin/sleep 0.3\nExecStart=/bin/sleep infinity\n",
	"kt-sd-2.service": "[Unit]\nAfter=kt-sd-1.service\n[Service]\nExecStart=/bin/sleep infinity\n",
	// The same without the ordering: StartAll starts them together, so the
	// quick one is active before the slow one.
	"kt-sd-slow.service":  "[Service]\nExecStartPre=/bin/sleep 0.5\nExecStart=/bin/sleep infinity\n",
	"kt-sd-quick.service": "[Service]\nExecStart=/bin/sleep infinity\n",
	"kt-sd-plain.service": "[Service]\nExecStart=/bin/sleep infinity\n",
	// Ignores SIGTERM (the ignore disposition is inherited by the sleeps),
	// systemd itself would wait 90 s before its own SIGKILL, and Restart=
	// would bring it back if the SIGKILL were not sent under a stop job.
	"kt-sd-stubborn.service": `[Unit]
StartLimitIntervalSec=0
[Service]
ExecStart=/bin/sh -c 'trap "" TERM; while :; do sleep 0.1; done'
KillMode=control-group
TimeoutStopSec=90
Restart=always
RestartSec=100ms
`,
	"kt-sd-crash.service": `[Unit]
StartLimitIntervalSec=0
[Service]
ExecStart=/bin/sh -c 'sleep 0.2; exit 3'
Restart=always
RestartSec=100ms
`,
	"kt-sd-skip.service": `[Unit]
ConditionPathExists=/nonexistent-kt-sd
[Service]
ExecStart=/bin/sleep infinity
`,
	"kt-sd-oneshot-fail.service": "[Service]\nType=oneshot\nExecStart=/bin/false\n",
	"kt-sd-behind.service":       "[Service]\nExecStart=/bin/sleep infinity\n",
	// Stands for a managed unit with Restart=always whose guard refuses
	// it on a standby: the ExecStartPre= fails until /run/kt-sd-allow
	// exists, systemd retries by itself and hits the start limit.
	"kt-sd-limited.service": `[Unit]
StartLimitIntervalSec=1h
StartLimitBurst=3
[Service]
ExecStartPre=/bin/test -e /run/kt-sd-allow
ExecStart=/bin/sleep infinity
Restart=always
RestartSec=100ms
`,
	"kt-sd-reexec.service":    "[Service]\nExecStart=/bin/sleep infinity\n",
	"kt-sd-dbus.service":      "[Service]\nExecStart=/bin/sleep infinity\n",
	"kt-sd-frozenbus.service": "[Service]\nExecStart=/bin/sleep infinity\n",
	// A unit with a child, for Stopped: both processes must be stopped.
	"kt-sd-sigstop.service": "[Service]\nExecStart=/bin/sh -c 'sleep infinity & exec sleep infinity'\n",
	// For a frozen PID 1: a main process with a child, and Restart= that
	// would bring it back once PID 1 runs again if no stop job were queued.
	"kt-sd-frozen1.service": "[Service]\nExecStart=/bin/sh -c 'sleep infinity & exec sleep infinity'\n",
	"kt-sd-frozen2.service": "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStart=/bin/sleep infinity\nRestart=always\nRestartSec=100ms\n",
	// The packaging question: B stands for kha-supervisor.service, A for a
	// managed unit carrying BindsTo=+After= on it.
	"kt-sd-bindb.service": `[Service]
Type=simple
ExecStart=/bin/sleep infinity
Restart=always
RestartSec=1
`,
	"kt-sd-binda.service": `[Unit]
BindsTo=kt-sd-bindb.service
After=kt-sd-bindb.service
[Service]
ExecStart=/bin/sleep infinity
`,
	// A supervisor whose stop takes a while (it demotes), and a managed
	// unit bound to it: systemd stops the bound unit first, while the
	// supervisor still runs and could start it again. The stop stays
	// pending until the test creates the release file, so a slow poll
	// on a loaded machine cannot miss it.
	"kt-sd-slowsup.service": `[Service]
ExecStartPre=/bin/rm -f /run/kt-sd-slowsup.release
ExecStart=/bin/sh -c 'trap "while [ ! -e /run/kt-sd-slowsup.release ]; do sleep 0.1; done; exit 0" TERM; while :; do sleep 0.1; done'
TimeoutStopSec=60
`,
	"kt-sd-boundunit.service": `[Unit]
BindsTo=kt-sd-slowsup.service
After=kt-sd-slowsup.service
[Service]
ExecStart=/bin/sleep infinity
`,
}

var (
	ctOnce sync.Once
	ct     *nspawn.Container
	ctErr  error
)

// container boots the shared container on first use, so tests of this
// package that do not need systemd do not need root either.
func container(t *testing.T) *nspawn.Container {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "systemd-nspawn", "nsenter", "ip")
	ctOnce.Do(func() {
		if _, err := nspawn.CleanupStale(ctPrefix); err != nil {
			ctErr = fmt.Errorf("cleanup of earlier runs: %w", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := time.Now()
		ct, ctErr = nspawn.Boot(ctx, nspawn.Options{Name: fmt.Sprintf("%s%d", ctPrefix, os.Getpid())})
		if ctErr != nil {
			return
		}
		t.Logf("container %s booted in %s", ct.Name(), time.Since(start).Round(time.Millisecond))
		for name, body := range testUnits {
			if ctErr = ct.WriteFile("/etc/systemd/system/"+name, []byte(body), 0o644); ctErr != nil {
				return
			}
		}
		_, ctErr = ct.Exec(ctx, "systemctl", "daemon-reload")
	})
	if ctErr != nil {
		t.Fatalf("test container: %v", ctErr)
	}
	return ct
}

func TestMain(m *testing.M) {
	if path := os.Getenv(privateDialEnv); path != "" {
		os.Exit(privateDialHelper(path))
	}
	code := m.Run()
	if ct != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := ct.Shutdown(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "shutdown of test container: %v\n", err)
			code = 1
		}
		cancel()
	}
	os.Exit(code)
}

// newSystemd connects to the container's systemd with a logger that writes
// to the test log and counts warnings.
func newSystemd(t *testing.T, c *nspawn.Container) (*systemd.Units, *counter) {
	t.Helper()
	cnt := &counter{}
	lg := slog.New(&testHandler{t: t, cnt: cnt})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := systemd.New(ctx, c.SystemBus(), lg)
	if err != nil {
		cancel()
		t.Fatalf("NewSystemd: %v", err)
	}
	t.Cleanup(func() { s.Close(); cancel() })
	return s, cnt
}

// exec runs a command in the container; failure is fatal.
func exec(t *testing.T, c *nspawn.Container, argv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Exec(ctx, argv...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return strings.TrimSpace(string(out))
}

// resetFailed clears a failed state; systemd may already have unloaded
// the unit, so errors do not matter.
func resetFailed(c *nspawn.Container, unit string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, "systemctl", "reset-failed", unit)
}

// show reads one unit property with systemctl inside the container: an
// observer independent of the code under test.
func show(t *testing.T, c *nspawn.Container, unit, prop string) string {
	t.Helper()
	return exec(t, c, "systemctl", "show", "-p", prop, "--value", unit)
}

func showUint(t *testing.T, c *nspawn.Container, unit, prop string) uint64 {
	t.Helper()
	v := show(t, c, unit, prop)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s %s = %q: %v", unit, prop, v, err)
	}
	return n
}

func state(t *testing.T, s *systemd.Units, unit string) fencing.UnitState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sts, err := s.States(ctx, []string{unit})
	if err != nil {
		t.Fatalf("States(%s): %v", unit, err)
	}
	return sts[0]
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var timeouts = fencing.Timeouts{Start: 20 * time.Second, Stop: 1 * time.Second, KillGrace: 10 * time.Second}

func bg(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// StartAll starts the units together: one unit's slow start does not
// delay the next (issue 21 item 5: the scheduler waited for the
// controller-manager's start job); an operator orders them with After=.
func TestSystemdStartAllTogether(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	units := []string{"kt-sd-slow.service", "kt-sd-quick.service"}
	if err := fencing.StartAll(bg(t, time.Minute), s, units, timeouts); err != nil {
		t.Fatalf("StartAll: %v", err)
	}
	slow := showUint(t, c, units[0], "ActiveEnterTimestampMonotonic")
	quick := showUint(t, c, units[1], "ActiveEnterTimestampMonotonic")
	t.Logf("slow active at %d µs, quick at %d µs (monotonic)", slow, quick)
	if slow == 0 || quick == 0 || quick >= slow {
		t.Fatalf("%s became active at %d, not before %s at %d (its ExecStartPre= sleeps 0.5 s): the starts were not concurrent", units[1], quick, units[0], slow)
	}
}

// With After= between them, StartAll's concurrent starts keep systemd's
// order.
func TestSystemdStartAllInOrder(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	units := []string{"kt-sd-1.service", "kt-sd-2.service"}
	if err := fencing.StartAll(bg(t, time.Minute), s, units, timeouts); err != nil {
		t.Fatalf("StartAll: %v", err)
	}
	for _, u := range units {
		if got := show(t, c, u, "ActiveState"); got != "active" {
			t.Fatalf("%s is %s after StartAll", u, got)
		}
		if st := state(t, s, u); st.ActiveState != "active" || st.SubState != "running" {
			t.Fatalf("States(%s) = %+v", u, st)
		}
	}
	t1 := showUint(t, c, units[0], "ActiveEnterTimestampMonotonic")
	t2 := showUint(t, c, units[1], "ActiveEnterTimestampMonotonic")
	t.Logf("active at %d µs and %d µs (monotonic)", t1, t2)
	if t1 == 0 || t1 >= t2 {
		t.Fatalf("%s became active at %d, not before %s at %d", units[0], t1, units[1], t2)
	}

	// StopAll: reverse order, each confirmed before the next. Stopped units
	// may be garbage-collected by systemd (their timestamps then read 0),
	// so the order is read from systemd's job-completion journal records.
	if err := fencing.StopAll(bg(t, time.Minute), s, units, timeouts); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
	for _, u := range units {
		if got := show(t, c, u, "ActiveState"); got != "inactive" {
			t.Fatalf("%s is %s after StopAll", u, got)
		}
	}
	var at map[string]uint64
	waitFor(t, "stop job records in the journal", 10*time.Second, func() bool {
		at = jobDone(t, c, "stop", units...)
		return len(at) == 2
	})
	t.Logf("stop jobs done at %v (monotonic µs)", at)
	if at[units[1]] >= at[units[0]] {
		t.Fatalf("StopAll stopped %s (at %d) before %s (at %d)", units[0], at[units[0]], units[1], at[units[1]])
	}
}

// jobDone returns, per unit, the monotonic time (µs) of the last journal
// record of a completed job of the given type (systemd's structured
// job-result message, JOB_TYPE/JOB_RESULT fields).
func jobDone(t *testing.T, c *nspawn.Container, jobType string, units ...string) map[string]uint64 {
	t.Helper()
	return journalLast(t, c, []string{"JOB_TYPE=" + jobType, "JOB_RESULT=done"}, units...)
}

// journalLast returns, per unit, the monotonic time (µs) of the last
// journal record matching every field match.
func journalLast(t *testing.T, c *nspawn.Container, matches []string, units ...string) map[string]uint64 {
	t.Helper()
	out := exec(t, c, append([]string{"journalctl", "--no-pager", "-o", "json"}, matches...)...)
	want := map[string]bool{}
	for _, u := range units {
		want[u] = true
	}
	res := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			Unit string `json:"UNIT"`
			Mono string `json:"__MONOTONIC_TIMESTAMP"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) != nil || !want[rec.Unit] {
			continue
		}
		if n, err := strconv.ParseUint(rec.Mono, 10, 64); err == nil {
			res[rec.Unit] = n
		}
	}
	return res
}

// ignoresTERM reports whether unit's main process has SIGTERM ignored
// (bit 15 of SigIgn in /proc/PID/status).
func ignoresTERM(t *testing.T, c *nspawn.Container, unit string) bool {
	t.Helper()
	pid := show(t, c, unit, "MainPID")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := c.Exec(ctx, "cat", "/proc/"+pid+"/status")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<(15-1)) != 0
		}
	}
	return false
}

// recorder counts Kill calls on the way to the real implementation.
type recorder struct {
	fencing.Units
	mu    sync.Mutex
	kills []string
}

func (r *recorder) Kill(ctx context.Context, unit string) error {
	r.mu.Lock()
	r.kills = append(r.kills, unit)
	r.mu.Unlock()
	return r.Units.Kill(ctx, unit)
}

func TestSystemdFenceEscalatesToSIGKILL(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	units := []string{"kt-sd-plain.service", "kt-sd-stubborn.service"}
	if err := fencing.StartAll(bg(t, time.Minute), s, units, timeouts); err != nil {
		t.Fatalf("StartAll: %v", err)
	}
	// Type=simple is active once forked; wait until the shell really
	// ignores SIGTERM, or a slow machine makes this test vacuous.
	waitFor(t, "the stubborn unit to ignore SIGTERM", 20*time.Second, func() bool {
		return ignoresTERM(t, c, "kt-sd-stubborn.service")
	})
	rec := &recorder{Units: s}
	start := time.Now()
	err := fencing.Fence(bg(t, time.Minute), rec, units, timeouts)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Fence: %v", err)
	}
	t.Logf("Fence took %s (StopMax %s); SIGKILL sent to %v", took.Round(time.Millisecond), timeouts.StopMax(), rec.kills)
	killedStubborn := false
	for _, u := range rec.kills {
		killedStubborn = killedStubborn || u == "kt-sd-stubborn.service"
	}
	if !killedStubborn {
		t.Fatalf("Fence did not need SIGKILL for the SIGTERM-ignoring unit (kills: %v)", rec.kills)
	}
	for _, u := range units {
		if got := show(t, c, u, "ActiveState"); got != "inactive" && got != "failed" {
			t.Fatalf("%s is %s after Fence", u, got)
		}
		if pid := show(t, c, u, "MainPID"); pid != "0" {
			t.Fatalf("%s still has main PID %s", u, pid)
		}
	}
	// Killed under the pending stop job, so Restart=always did not fire.
	time.Sleep(500 * time.Millisecond)
	if got := show(t, c, "kt-sd-stubborn.service", "ActiveState"); got != "inactive" && got != "failed" {
		t.Fatalf("stubborn unit is %s 0.5 s after Fence: restarted", got)
	}
	if n := show(t, c, "kt-sd-stubborn.service", "NRestarts"); n != "0" {
		t.Fatalf("stubborn unit restarted %s times", n)
	}
	// Nothing of the stubborn unit survives in the container.
	if out, _ := c.Exec(bg(t, 10*time.Second), "pgrep", "-f", "trap"); len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("processes of the stubborn unit still run: %s", out)
	}
	resetFailed(c, "kt-sd-stubborn.service")
}

func TestSystemdStatesSeesStartBehindBack(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	const u = "kt-sd-behind.service"
	if st := state(t, s, u); st.Running() {
		t.Fatalf("%s running before the test: %+v", u, st)
	}
	exec(t, c, "systemctl", "start", u)
	if st := state(t, s, u); st.ActiveState != "active" {
		t.Fatalf("States after an operator's start = %+v, want active", st)
	}
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := show(t, c, u, "ActiveState"); got != "inactive" {
		t.Fatalf("%s is %s after Stop", u, got)
	}
}

func TestSystemdRestartCountAndStopDuringAutoRestart(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	const u = "kt-sd-crash.service"
	// The unit crashes 0.2 s after each start: Start may see it active, or
	// in between restarts (then it keeps polling for "active").
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start: %v", err)
	}
	var st fencing.UnitState
	waitFor(t, "two restarts", 30*time.Second, func() bool {
		st = state(t, s, u)
		return st.NRestarts >= 2
	})
	if want := showUint(t, c, u, "NRestarts"); uint64(st.NRestarts) > want {
		t.Fatalf("States NRestarts %d, systemctl says %d", st.NRestarts, want)
	}
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Stop of a crash-looping unit: %v", err)
	}
	// Stopped for good: no restart is pending.
	n := showUint(t, c, u, "NRestarts")
	time.Sleep(500 * time.Millisecond)
	if got := show(t, c, u, "ActiveState"); got != "inactive" && got != "failed" {
		t.Fatalf("%s is %s after Stop", u, got)
	}
	if m := showUint(t, c, u, "NRestarts"); m != n {
		t.Fatalf("%s restarted after Stop (NRestarts %d -> %d)", u, n, m)
	}
	resetFailed(c, u)
}

func TestSystemdEdgeCases(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	ctx := bg(t, time.Minute)

	// A start job that is "done" although the unit did not start (skipped
	// condition) must not be reported as started.
	err := s.Start(ctx, "kt-sd-skip.service")
	if err == nil {
		t.Fatal("Start of a unit whose condition fails returned nil")
	}
	t.Logf("Start(skip): %v", err)

	// An unknown unit: systemd's answer is "inactive"; stopping or killing
	// it is a no-op, starting it an error.
	const missing = "kt-sd-no-such-unit.service"
	if st := state(t, s, missing); st.ActiveState != "inactive" {
		t.Fatalf("States(%s) = %+v", missing, st)
	}
	if err := s.Stop(ctx, missing); err != nil {
		t.Fatalf("Stop(%s): %v", missing, err)
	}
	if err := s.Kill(ctx, missing); err != nil {
		t.Fatalf("Kill(%s): %v", missing, err)
	}
	if err := s.Start(ctx, missing); err == nil {
		t.Fatalf("Start(%s) returned nil", missing)
	}
	// A start job that fails is an error; the unit stays loaded (failed),
	// and killing it, with no process left, has nothing to do.
	const failing = "kt-sd-oneshot-fail.service"
	if err := s.Start(ctx, failing); err == nil {
		t.Fatalf("Start(%s) returned nil", failing)
	} else {
		t.Logf("Start(%s): %v", failing, err)
	}
	if st := state(t, s, failing); st.ActiveState != "failed" {
		t.Fatalf("States(%s) = %+v, want failed", failing, st)
	}
	if err := s.Kill(ctx, failing); err != nil {
		t.Fatalf("Kill of a failed unit without processes: %v", err)
	}
	resetFailed(c, failing)
	// A call whose ctx has expired fails instead of reporting a state.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.States(dead, []string{"kt-sd-plain.service"}); err == nil {
		t.Fatal("States with an expired ctx returned no error")
	}
}

// watcher polls States in the background and records any answer that
// calls a running unit not running: across daemon-reexec or a dbus restart
// an error is acceptable, a wrong "stopped" is not.
type watcher struct {
	ok, errs, wrong atomic.Int64
	lastWrong       atomic.Value
	lastErr         atomic.Value
	stop            chan struct{}
	done            chan struct{}
}

func watch(s *systemd.Units, unit string) *watcher {
	w := &watcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sts, err := s.States(ctx, []string{unit})
			cancel()
			switch {
			case err != nil:
				w.errs.Add(1)
				w.lastErr.Store(err.Error())
			case !sts[0].Running():
				w.wrong.Add(1)
				w.lastWrong.Store(sts[0])
			default:
				w.ok.Add(1)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return w
}

func (w *watcher) finish() { close(w.stop); <-w.done }

func TestSystemdSurvivesDaemonReexec(t *testing.T) {
	c := container(t)
	s, cnt := newSystemd(t, c)
	const u = "kt-sd-reexec.service"
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start: %v", err)
	}
	mainPID := show(t, c, u, "MainPID")
	w := watch(s, u)
	for range 2 {
		exec(t, c, "systemctl", "daemon-reexec")
	}
	before := w.ok.Load()
	waitFor(t, "States answers after daemon-reexec", 20*time.Second, func() bool { return w.ok.Load() > before+5 })
	w.finish()
	t.Logf("during daemon-reexec: %d correct answers, %d errors, %d wrong; %d warnings logged", w.ok.Load(), w.errs.Load(), w.wrong.Load(), cnt.warn.Load())
	if w.wrong.Load() > 0 {
		t.Fatalf("States reported the running unit as %+v during daemon-reexec", w.lastWrong.Load())
	}
	if got := show(t, c, u, "MainPID"); got != mainPID {
		t.Fatalf("unit restarted across daemon-reexec (main PID %s -> %s); the test proves nothing", mainPID, got)
	}
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Stop after daemon-reexec: %v", err)
	}
	if st := state(t, s, u); st.Running() {
		t.Fatalf("after Stop: %+v", st)
	}
}

func TestSystemdReconnectsAfterDbusRestart(t *testing.T) {
	c := container(t)
	s, cnt := newSystemd(t, c)
	const u = "kt-sd-dbus.service"
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start: %v", err)
	}
	w := watch(s, u)
	for range 3 {
		busPID := show(t, c, "dbus.service", "MainPID")
		exec(t, c, "systemctl", "restart", "dbus.service")
		if got := show(t, c, "dbus.service", "MainPID"); got == busPID {
			t.Fatalf("dbus-daemon was not restarted (PID %s)", got)
		}
		time.Sleep(300 * time.Millisecond)
	}
	before := w.ok.Load()
	waitFor(t, "States answers after the dbus restart", 30*time.Second, func() bool { return w.ok.Load() > before+5 })
	w.finish()
	t.Logf("across the dbus restart: %d correct answers, %d errors (last: %v), %d wrong; %d reconnects logged", w.ok.Load(), w.errs.Load(), w.lastErr.Load(), w.wrong.Load(), cnt.reconnects.Load())
	if w.wrong.Load() > 0 {
		t.Fatalf("States reported the running unit as %+v across the dbus restart", w.lastWrong.Load())
	}
	if cnt.reconnects.Load() == 0 {
		t.Fatal("no reconnect was logged although dbus-daemon was restarted")
	}
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Stop after the dbus restart: %v", err)
	}
	if got := show(t, c, u, "ActiveState"); got != "inactive" {
		t.Fatalf("%s is %s after Stop", u, got)
	}
}

// TestBindsToFacts records what systemd 252 does with the dependency the
// packaging relies on: managed unit A has BindsTo=B + After=B, where B
// (standing in for kha-supervisor.service) is Type=simple, Restart=always,
// RestartSec=1.
//
// Measured on Debian 12 (systemd 252.39): when B's main process is killed
// with SIGKILL, B goes to "failed" (result 'signal') before its restart is
// scheduled, and that transition stops A within a few milliseconds; when B
// comes back a second later, A stays stopped (BindsTo= does not start it
// again). `systemctl start A` with B stopped starts B first, then A (BindsTo=
// pulls B in like Requires=). `systemctl restart B` restarts A too (new main
// PID), with no lease check — hence the ExecStartPre= guard on managed units.
func TestBindsToFacts(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	const a, b = "kt-sd-binda.service", "kt-sd-bindb.service"
	both := []string{a, b}

	// 1. Starting A pulls in B.
	exec(t, c, "systemctl", "start", a)
	for _, u := range both {
		if st := state(t, s, u); st.ActiveState != "active" {
			t.Fatalf("after `systemctl start %s`: %s is %+v", a, u, st)
		}
	}
	if ta, tb := showUint(t, c, a, "ActiveEnterTimestampMonotonic"), showUint(t, c, b, "ActiveEnterTimestampMonotonic"); tb >= ta {
		t.Fatalf("B became active at %d, not before A at %d", tb, ta)
	}

	// 2. SIGKILL of B's main process: does A stop, and does it stay down
	// once Restart= brought B back?
	bPID := show(t, c, b, "MainPID")
	killed := time.Now()
	exec(t, c, "kill", "-9", bPID)
	var aDown time.Duration
	waitFor(t, "A to stop after B was SIGKILLed", 10*time.Second, func() bool {
		if !state(t, s, a).Running() {
			aDown = time.Since(killed)
			return true
		}
		return false
	})
	waitFor(t, "B restarted by Restart=always", 15*time.Second, func() bool {
		st := state(t, s, b)
		return st.ActiveState == "active" && st.NRestarts >= 1 && show(t, c, b, "MainPID") != bPID
	})
	time.Sleep(500 * time.Millisecond)
	if st := state(t, s, a); st.Running() {
		t.Fatalf("A came back with B: %+v", st)
	}
	t.Logf("A observed stopped %s after B's SIGKILL (polled from the host); A stays stopped after B's restart", aDown.Round(time.Millisecond))
	// systemd's own timing: B's failure record to A's completed stop job.
	var failed, stopped map[string]uint64
	waitFor(t, "journal records of B's failure and A's stop", 10*time.Second, func() bool {
		failed = journalLast(t, c, []string{"UNIT_RESULT=signal"}, b)
		stopped = jobDone(t, c, "stop", a)
		return failed[b] != 0 && stopped[a] != 0
	})
	if stopped[a] < failed[b] {
		t.Fatalf("A's stop job (at %d µs) finished before B failed (at %d µs): stopped by something else", stopped[a], failed[b])
	}
	t.Logf("journal: A's stop job done %d µs after B's failure record", stopped[a]-failed[b])

	// 3. An operator's restart of B restarts A as well.
	exec(t, c, "systemctl", "start", a)
	aPID := show(t, c, a, "MainPID")
	exec(t, c, "systemctl", "restart", b)
	waitFor(t, "A active after restart of B", 10*time.Second, func() bool { return show(t, c, a, "ActiveState") == "active" })
	if got := show(t, c, a, "MainPID"); got == aPID {
		t.Fatalf("`systemctl restart B` left A's main process alone (PID %s)", got)
	}

	if err := fencing.StopAll(bg(t, time.Minute), s, []string{b, a}, timeouts); err != nil {
		t.Fatalf("StopAll: %v", err)
	}
}

// counter counts log records the tests assert on.
type counter struct {
	warn, reconnects atomic.Int64
}

// testHandler sends slog records to the test log.
type testHandler struct {
	t     *testing.T
	cnt   *counter
	attrs []slog.Attr
}

func (h *testHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *testHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.cnt.warn.Add(1)
	}
	if r.Message == "reconnected to systemd" {
		h.cnt.reconnects.Add(1)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s", a)
	}
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
	h.t.Log(b.String())
	return nil
}

func (h *testHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &testHandler{t: h.t, cnt: h.cnt, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *testHandler) WithGroup(string) slog.Handler { return h }

// Guard refusals (a failing ExecStartPre=) count towards the unit's start
// limit; once this node holds the lease, its own start must not fail with
// start-limit-hit because an operator retried on the standby.
func TestSystemdStartClearsStartLimit(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	const u = "kt-sd-limited.service"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.Exec(ctx, "systemctl", "start", u) // refused by ExecStartPre; systemd retries
	// systemd 252 keeps Result=exit-code here; its journal says it.
	waitFor(t, u+" to hit its start limit", 20*time.Second, func() bool {
		return strings.Contains(exec(t, c, "journalctl", "-u", u, "--no-pager"), "repeated too quickly")
	})
	exec(t, c, "touch", "/run/kt-sd-allow")
	if err := s.Start(bg(t, 20*time.Second), u); err != nil {
		t.Fatalf("Start after start-limit-hit: %v", err)
	}
	if got := show(t, c, u, "ActiveState"); got != "active" {
		t.Fatalf("%s is %s", u, got)
	}
	if err := s.Stop(bg(t, 20*time.Second), u); err != nil {
		t.Fatal(err)
	}
}

// An operator's `systemctl stop kha-supervisor` first stops the units bound
// to it, while the supervisor still runs; a start the supervisor issues in
// that window (its monitor saw a unit down) must not cancel the pending
// stop, which a start job in mode "replace" did ("Job for
// kha-supervisor.service canceled."; seen on the lab's real control plane).
func TestSystemdStartNeverCancelsAPendingStop(t *testing.T) {
	c := container(t)
	s, _ := newSystemd(t, c)
	const sup, unit = "kt-sd-slowsup.service", "kt-sd-boundunit.service"
	exec(t, c, "systemctl", "start", unit)
	release := func() { exec(t, c, "touch", "/run/kt-sd-slowsup.release") }
	t.Cleanup(func() {
		// A failed test leaves neither the stop pending for a minute nor,
		// had the start cancelled the stop, both units running.
		release()
		exec(t, c, "systemctl", "--no-block", "stop", sup, unit)
	})
	exec(t, c, "systemctl", "--no-block", "stop", sup)
	waitFor(t, "the bound unit stopped while the supervisor's stop is pending", 10*time.Second, func() bool {
		return !state(t, s, unit).Running() && show(t, c, sup, "ActiveState") == "deactivating"
	})
	err := s.Start(bg(t, 10*time.Second), unit)
	if !errors.Is(err, fencing.ErrStopPending) {
		t.Errorf("start during the supervisor's pending stop: %v, want ErrStopPending", err)
	}
	if got := show(t, c, sup, "ActiveState"); got != "deactivating" {
		t.Fatalf("the supervisor's stop ended before the start was tried (%s): the test proved nothing", got)
	}
	release()
	waitFor(t, "the supervisor's stop to complete", 15*time.Second, func() bool {
		return show(t, c, sup, "ActiveState") == "inactive"
	})
	if st := state(t, s, unit); st.Running() {
		t.Fatalf("the bound unit runs after the supervisor stopped: %+v", st)
	}
}
