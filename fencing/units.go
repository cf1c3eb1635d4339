package fencing

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// UnitState is what the supervisor needs to know of one managed unit.
type UnitState struct {
	Name        string `json:"name"`
	ActiveState string `json:"active_state"` // systemd ActiveState: active, inactive, failed, activating, deactivating, reloading
	SubState    string `json:"sub_state,omitempty"`
	NRestarts   uint32 `json:"n_restarts,omitempty"` // systemd's restart counter for Restart= services
}

// Running reports whether the unit may have live processes: anything that is
// not inactive or failed counts, so standby enforcement and fencing treat a
// unit that is activating or deactivating as running.
func (s UnitState) Running() bool {
	return s.ActiveState != "inactive" && s.ActiveState != "failed" && s.ActiveState != ""
}

// Units is the seam to the service manager. The production implementation
// talks to systemd over D-Bus (Systemd); tests use Memory. Every method must
// honour ctx and return once it expires.
type Units interface {
	// Start starts unit and returns once its start job finished and the
	// unit's ActiveState was re-read as active (a "done" job alone does not
	// prove that).
	Start(ctx context.Context, unit string) error
	// Stop stops unit and returns once its ActiveState is inactive or failed.
	Stop(ctx context.Context, unit string) error
	// Kill sends SIGKILL to every process of unit. It does not wait.
	Kill(ctx context.Context, unit string) error
	// States reads the current state of the named units, in order.
	States(ctx context.Context, units []string) ([]UnitState, error)
}

// DirectKiller is implemented by Units that can kill a unit's processes
// without the service manager's help (Systemd does, from the unit's cgroup;
// see fencing/cgroup). Fence uses it as its last resort, so that a hung PID 1
// or bus cannot keep the units up past the stop budget.
type DirectKiller interface {
	// KillDirect sends SIGKILL to every process of unit and returns nil
	// once a fresh read finds none left, or an error when ctx ends first
	// or nothing can be confirmed.
	KillDirect(ctx context.Context, unit string) error
}

// StopReader is implemented by Units that can tell a unit whose processes
// cannot run (stopped by SIGSTOP or a debugger, or frozen by the cgroup
// freezer) from one that is only slow (Systemd does, from the unit's cgroup
// and /proc). The health probes use it to call such a unit hung without
// waiting for their timeouts; it proves nothing to the fence.
type StopReader interface {
	// Stopped reports whether every process of unit is stopped or its
	// control group frozen; false for a unit without processes, and an
	// error when it cannot tell (the verdict is then left to the probes).
	Stopped(unit string) (bool, error)
}

// ExecReader is implemented by Units that can say which executables each
// unit runs (systemd's ExecStart), so that copies of them started outside
// the units can be looked for.
type ExecReader interface {
	// Executables returns, per unit, the absolute paths its ExecStart=
	// lines run.
	Executables(ctx context.Context, units []string) (map[string][]string, error)
}

// Timeouts bound unit operations.
type Timeouts struct {
	Start     time.Duration // per unit: start job plus confirmation
	Stop      time.Duration // per unit: graceful stop before SIGKILL
	KillGrace time.Duration // after SIGKILL, until the unit must be confirmed stopped
}

// StopMax is the worst-case time Fence needs: every unit is stopped at once,
// so the budget does not grow with the number of units.
func (t Timeouts) StopMax() time.Duration { return t.Stop + t.KillGrace }

// QueuedStarter is implemented by Units whose start job is queued before it
// runs (systemd's job queue). StartQueued is Start, calling queued once the
// job is in the queue (never when the start fails before that).
type QueuedStarter interface {
	StartQueued(ctx context.Context, unit string, queued func()) error
}

// StartAll starts every unit at once and returns when each start job has
// ended, confirmed active or failed: one unit's slow start (its
// ExecStartPre= guard, a slow exec) does not delay the next. An order
// between them is the service manager's: systemd holds a start job ordered
// After= another unit's while that one's is queued or running, so the jobs
// are queued in list order (each once the one before is in the queue, a
// round trip, not a start) and run concurrently from there. Queued
// together from concurrent calls, the later unit's job could be queued
// first and run unordered. A unit that fails does not keep the others from
// starting; the joined error names each failure and the caller unwinds
// (normally StopAll).
func StartAll(ctx context.Context, u Units, units []string, t Timeouts) error {
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for i, name := range units {
		queued := make(chan struct{})
		var once sync.Once
		markQueued := func() { once.Do(func() { close(queued) }) }
		wg.Go(func() {
			defer markQueued() // a start that failed before its job was queued
			cctx, cancel := context.WithTimeout(ctx, t.Start)
			defer cancel()
			if err := startQueued(cctx, u, name, markQueued); err != nil {
				errs[i] = fmt.Errorf("start %s: %w", name, err)
			}
		})
		<-queued
	}
	wg.Wait()
	return errors.Join(errs...)
}

func startQueued(ctx context.Context, u Units, unit string, queued func()) error {
	if q, ok := u.(QueuedStarter); ok {
		return q.StartQueued(ctx, unit, queued)
	}
	queued() // no queue to order by: the starts are simply concurrent
	return u.Start(ctx, unit)
}

// StopAll stops units in reverse order (the graceful path: demotion,
// handoff, shutdown). A unit that does not stop within t.Stop is killed and
// must be confirmed stopped within t.KillGrace. Every unit is attempted even
// when an earlier one fails; the joined error names each failure.
func StopAll(ctx context.Context, u Units, units []string, t Timeouts) error {
	var errs []error
	for i := len(units) - 1; i >= 0; i-- {
		if err := stopOne(ctx, u, units[i], t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Fence stops every unit at once, escalating to SIGKILL for any that is not
// down after t.Stop, and returns within about t.StopMax(). It is the path
// taken when the lease can no longer be proven, so it trades the ordered
// shutdown of StopAll for a bound that does not grow with the unit count.
func Fence(ctx context.Context, u Units, units []string, t Timeouts) error {
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	for i, name := range units {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stopOne(ctx, u, name, t)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func stopOne(ctx context.Context, u Units, name string, t Timeouts) error {
	sctx, cancel := context.WithTimeout(ctx, stopBudget(ctx, t))
	err := u.Stop(sctx, name)
	cancel()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("stop %s: %w", name, ctx.Err())
	}
	// Graceful stop did not finish in time: hurry it. The stop job stays
	// queued, so a unit with Restart= is not brought back by systemd.
	kctx, kcancel := context.WithTimeout(ctx, t.KillGrace)
	defer kcancel()
	d, ok := u.(DirectKiller)
	if !ok {
		return killViaManager(kctx, u, name, err, t)
	}
	// The manager may be the reason the stop did not finish (PID 1 or its
	// bus hung): kill through it and from the cgroup at the same time; the
	// first confirmation wins.
	res := make(chan error, 2)
	go func() { res <- killViaManager(kctx, u, name, err, t) }()
	go func() {
		if derr := d.KillDirect(kctx, name); derr != nil {
			res <- fmt.Errorf("stop %s: direct SIGKILL: %w", name, derr)
			return
		}
		res <- nil
	}()
	first := <-res
	if first == nil {
		return nil
	}
	if second := <-res; second != nil {
		return errors.Join(first, second)
	}
	return nil
}

// stopBudget is how long the graceful stop may take: t.Stop, but never so
// long that a squeezed ctx (a second look late in the fence) leaves the
// SIGKILL no time. Up to t.KillGrace, at most half of what is left, is kept
// for it.
func stopBudget(ctx context.Context, t Timeouts) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return t.Stop
	}
	left := time.Until(dl)
	return min(t.Stop, left-min(t.KillGrace, left/2))
}

func killViaManager(ctx context.Context, u Units, name string, stopErr error, t Timeouts) error {
	if kerr := u.Kill(ctx, name); kerr != nil {
		return fmt.Errorf("stop %s: %v; SIGKILL: %w", name, stopErr, kerr)
	}
	if werr := u.Stop(ctx, name); werr != nil {
		return fmt.Errorf("stop %s: not confirmed stopped %s after SIGKILL: %w", name, t.KillGrace, werr)
	}
	return nil
}

// ConfirmDown is Fence's second look: the units are read again and any
// found running is fenced again. When the manager cannot be read and u can
// kill directly, every unit is killed (a no-op for an empty cgroup) and
// confirmed from its cgroup instead: "cannot see" never counts as stopped.
func ConfirmDown(ctx context.Context, u Units, units []string, t Timeouts) error {
	// Leave half of the time for the cgroups if the manager does not answer.
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		rctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
	}
	states, err := u.States(rctx, units)
	cancel()
	if err == nil {
		var running []string
		for _, st := range states {
			if st.Running() {
				running = append(running, st.Name)
			}
		}
		if len(running) == 0 {
			return nil
		}
		if ferr := Fence(ctx, u, running, t); ferr != nil {
			return ferr
		}
		if states, err = u.States(ctx, units); err == nil {
			for _, st := range states {
				if st.Running() {
					return fmt.Errorf("%s still %s after a second fence", st.Name, st.ActiveState)
				}
			}
			return nil
		}
	}
	d, ok := u.(DirectKiller)
	if !ok {
		return fmt.Errorf("confirm stopped: %w", err)
	}
	var errs []error
	for _, name := range units {
		if derr := d.KillDirect(ctx, name); derr != nil {
			errs = append(errs, fmt.Errorf("confirm %s stopped: state unreadable (%v); cgroup: %w", name, err, derr))
		}
	}
	return errors.Join(errs...)
}

// ErrStopPending is returned by a start that systemd refused because it
// would cancel a pending stop (an operator's `systemctl stop
// kha-supervisor` stops the bound units first): not a unit failure.
var ErrStopPending = errors.New("a stop of a unit it depends on is pending")
