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

// Timeouts bound unit operations.
type Timeouts struct {
	Start     time.Duration // per unit: start job plus confirmation
	Stop      time.Duration // per unit: graceful stop before SIGKILL
	KillGrace time.Duration // after SIGKILL, until the unit must be confirmed stopped
}

// StopMax is the worst-case time Fence needs: every unit is stopped at once,
// so the budget does not grow with the number of units.
func (t Timeouts) StopMax() time.Duration { return t.Stop + t.KillGrace }

// StartAll starts units in order, each confirmed active before the next one
// starts. It stops at the first failure and returns it; the caller decides
// how to unwind (normally StopAll).
func StartAll(ctx context.Context, u Units, units []string, t Timeouts) error {
	for _, name := range units {
		cctx, cancel := context.WithTimeout(ctx, t.Start)
		err := u.Start(cctx, name)
		cancel()
		if err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
	}
	return nil
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
	sctx, cancel := context.WithTimeout(ctx, t.Stop)
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
	if kerr := u.Kill(kctx, name); kerr != nil {
		return fmt.Errorf("stop %s: %v; SIGKILL: %w", name, err, kerr)
	}
	if werr := u.Stop(kctx, name); werr != nil {
		return fmt.Errorf("stop %s: not confirmed stopped %s after SIGKILL: %w", name, t.KillGrace, werr)
	}
	return nil
}
