package supervisor

import "time"

// Clock is where the loop and its observers take the time of day for their
// decisions: cooldowns, the failure window, the start-up retry, the
// start-pre grace, the barrier's waits, history and status. Tests inject
// one to drive those decisions without waiting; the daemon uses the real
// clock (Options.Clock nil).
//
// The fence clock is deliberately NOT on it. Every instant handed to
// fencing.Deadline (a grant's or a renewal's send time, the "now" that asks
// whether the deadline passed or how long is left) and the fence's own hard
// stop deadline are read from time.Now() (deadlineNow): Deadline maps them onto
// CLOCK_MONOTONIC_RAW by comparing them with its own time.Now() reading
// (fencing.RawClock), so an instant from any other clock would shift the
// fence instant by the difference, and the context deadlines that bound
// the fence run on Go's real timers whatever a Clock says.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// now is the loop's time of day (see Clock).
func (s *Supervisor) now() time.Time { return s.clock.Now() }

// deadlineNow is the time for the fence clock: every instant handed to
// fencing.Deadline or bounding the fence comes from here, never from a
// Clock (see Clock for why).
func deadlineNow() time.Time { return time.Now() }
