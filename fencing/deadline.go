// Package fencing holds what a node needs to take itself out of service in
// time: the fence clock (when must the units be down), unit control (how to
// bring them down, with SIGKILL escalation) and the local guard socket.
package fencing

import (
	"fmt"
	"time"
)

// Window is the timing budget behind the safety inequality
//
//	fence_at = t_s + TTL*(1-rho) - S_max - delta
//
// where t_s is the monotonic instant at which the supervisor SENT the renewal
// (or grant) whose successful answer it last received. etcd fixes a lease's
// expiry no earlier than it processes that request, so no other node can win
// before t_s + TTL in real time, or t_s + TTL*(1-rho) on our clock when it may
// run slow by rho (a fast clock only fences earlier). Everything must be stopped before then: stopping takes at
// most StopMax (TERM, wait, KILL, confirm) and Slack covers scheduling and
// detection.
//
// Watchdog covers a supervisor that freezes (SIGSTOP, livelock) after its
// renewals began to fail: systemd kills it Watchdog after its last ping, and
// up to WatchdogAccuracy later (WatchdogSec with WatchdogSignal=SIGKILL), and
// BindsTo= stops the units within StopMax. A ping is therefore a promise:
// sent at p, it says the units are down by p + W + A + S_max even if this
// process freezes right after it. Every ping must keep it, so no ping leaves
// after
//
//	ping_by = t_s + TTL*(1-rho) - S_max - W - A      (PingSpan)
//
// (Deadline.PingBy). When the loop pings up to its fence instant, as it
// always did, that forces the margin after StopMax to cover the larger of
// Slack and Watchdog + A:
//
//	fence_at = t_s + TTL*(1-rho) - S_max - max(delta, W + A)
//
// With Backstop the pings stop at ping_by instead, and the watchdog becomes
// the backstop for a fence that comes late: the loop fences at
//
//	fence_at = t_s + TTL*(1-rho) - S_max - delta
//
// and, if it is frozen or late there, systemd's kill lands by t_s +
// TTL*(1-rho) - S_max all the same. A fence that began after ping_by sends
// no ping until its units are confirmed down (docs/architecture.md, "The
// watchdog as the backstop"). delta should exceed A by the fence's own
// length: systemd may fire as early as ping_by + W = t_s + TTL*(1-rho) -
// S_max - A, and a fence it cuts short loses its epilogue.
type Window struct {
	TTL       time.Duration // lease TTL granted by etcd
	ClockRate float64       // rho: worst relative clock-rate error, e.g. 0.01
	StopMax   time.Duration // S_max: worst-case time to stop every managed unit
	Slack     time.Duration // delta: scheduling and detection slack
	Watchdog  time.Duration // W: systemd's WatchdogSec when it kills with SIGKILL; 0 without a watchdog
	// Backstop makes the watchdog the backstop for a late fence: pings stop
	// at PingSpan, and the margin after StopMax is Slack alone.
	Backstop bool
}

// WatchdogAccuracy (A) is how late systemd may fire a service's watchdog:
// it arms the timer with sd-event's default accuracy (service.c passes 0,
// which sd_event_add_time takes as 250 ms), and sd-event fires a timer
// anywhere between its due time and that much later, to coalesce wake-ups.
// So the kill after a ping at p comes between p + W and p + W + A.
const WatchdogAccuracy = 250 * time.Millisecond

// Margin is what is kept free after StopMax: max(Slack, Watchdog +
// WatchdogAccuracy), Slack without a watchdog, and Slack alone when the
// watchdog is the backstop. A backstop without a watchdog is none: its
// Slack, sized for a loop that systemd kills when late, must then also
// cover the loop's own lateness without one (a tick of 250 ms and the
// start gate's 200 ms wait), as the default 500 ms does.
func (w Window) Margin() time.Duration {
	switch {
	case w.Watchdog <= 0 && w.Backstop:
		return max(w.Slack, unwatchedSlack)
	case w.Watchdog <= 0 || w.Backstop:
		return w.Slack
	}
	return max(w.Slack, w.Watchdog+WatchdogAccuracy)
}

// unwatchedSlack is the least delta for a loop no watchdog watches: a tick
// (250 ms without a watchdog) and the start gate's wait (200 ms) may pass
// between the fence instant and the fence's first stop.
const unwatchedSlack = 500 * time.Millisecond

// Backstopped reports whether the watchdog, not the margin, covers the end
// of the window: pings stop before the fence instant.
func (w Window) Backstopped() bool {
	return w.Watchdog > 0 && w.Watchdog+WatchdogAccuracy > w.Margin()
}

// PingSpan is ping_by - t_s: how long after a renewal was sent a watchdog
// ping still promises that systemd's kill (at most Watchdog +
// WatchdogAccuracy later) and the units' stop land before the lease could
// lapse. Without a watchdog it is the Span.
func (w Window) PingSpan(ttl time.Duration) time.Duration {
	if w.Watchdog <= 0 {
		return w.Span(ttl)
	}
	return w.Span(ttl) + w.Margin() - w.Watchdog - WatchdogAccuracy
}

// Span is fence_at - t_s: how long after a renewal was sent the node may keep
// its units running without a newer successful renewal.
func (w Window) Span(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 0
	}
	safe := time.Duration(float64(ttl) * (1 - w.ClockRate))
	return safe - w.StopMax - w.Margin()
}

// Validate rejects windows that leave no room for renewals: the fence span
// must cover at least two renew intervals, so that one lost renewal does not
// fence a healthy leader.
func (w Window) Validate(renew time.Duration) error {
	switch {
	case w.TTL <= 0:
		return fmt.Errorf("lease TTL %s must be positive", w.TTL)
	case w.ClockRate < 0 || w.ClockRate >= 0.5:
		return fmt.Errorf("clock rate error %g must be in [0, 0.5)", w.ClockRate)
	case w.StopMax <= 0:
		return fmt.Errorf("stop budget %s must be positive", w.StopMax)
	case w.Slack < 0 || w.Watchdog < 0:
		return fmt.Errorf("slack %s and watchdog %s must not be negative", w.Slack, w.Watchdog)
	case renew <= 0:
		return fmt.Errorf("renew interval %s must be positive", renew)
	}
	// span/2 < renew rather than span < 2*renew: no overflow for absurd
	// renew intervals.
	// Under a backstop the pings stop PingSpan after a renewal: it must
	// cover two renew intervals as well, or a lost renewal gets a healthy
	// leader killed by its watchdog.
	if span := min(w.Span(w.TTL), w.PingSpan(w.TTL)); span < 0 || span/2 < renew {
		margin := fmt.Sprintf("slack %s", w.Slack)
		if w.Watchdog > 0 && w.Watchdog+WatchdogAccuracy > w.Slack {
			margin = fmt.Sprintf("systemd WatchdogSec %s + %s for its timer", w.Watchdog, WatchdogAccuracy)
		}
		return fmt.Errorf("fence window %s (TTL %s x (1-%g) - stop %s - %s) is under two renew intervals (2 x %s)",
			span, w.TTL, w.ClockRate, w.StopMax, margin, renew)
	}
	return nil
}

// Deadline tracks fence_at for one or more leases. Each lease keeps its own
// last proof of validity; the deadline is the earliest of them, because the
// node must be down before ANY lease it relies on could lapse. Callers pass
// time.Now() instants; the Deadline keeps them on its Clock
// (CLOCK_MONOTONIC_RAW in production, see Clock), so that NTP slewing of
// Go's clock cannot stretch the window. With IdentityClock it is a pure,
// table-testable value.
type Deadline struct {
	w      Window
	clock  Clock
	proofs map[string]time.Time // lease name -> fence instant from its last renewal, on clock
}

// NewDeadline returns a Deadline on CLOCK_MONOTONIC_RAW with no proof yet:
// Expired reports true until the first renewal is recorded.
func NewDeadline(w Window) *Deadline { return NewDeadlineClock(w, RawClock{}) }

// NewDeadlineClock is NewDeadline on the given clock.
func NewDeadlineClock(w Window, c Clock) *Deadline {
	return &Deadline{w: w, clock: c, proofs: map[string]time.Time{}}
}

// Renewed records that a request for lease name, sent at sent, succeeded with
// the given TTL. An answer older than the proof already held never moves the
// deadline backwards or forwards incorrectly: the later fence instant wins
// for that lease.
func (d *Deadline) Renewed(name string, sent time.Time, ttl time.Duration) {
	sent = d.clock.Past(sent)
	at := sent.Add(d.w.Span(ttl))
	if ttl <= 0 {
		at = sent // a zero TTL means the lease is gone: fence now
	}
	if prev, ok := d.proofs[name]; ok && prev.After(at) && ttl > 0 {
		return
	}
	d.proofs[name] = at
}

// Forget drops a lease from the computation (it was released on purpose).
func (d *Deadline) Forget(name string) { delete(d.proofs, name) }

// At is the fence instant as a time.Now() instant: the earliest over all
// tracked leases. ok is false when no lease is tracked.
func (d *Deadline) At() (at time.Time, ok bool) {
	if at, ok = d.at(); ok {
		at = d.clock.Out(at)
	}
	return at, ok
}

// at is the fence instant on d's clock.
func (d *Deadline) at() (at time.Time, ok bool) {
	for _, t := range d.proofs {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// PingBy is the last instant, as a time.Now() instant, at which a watchdog
// ping keeps its promise (Window.PingSpan): the fence instant moved by
// Margin - Watchdog - WatchdogAccuracy, for the earliest tracked lease. ok is false when no
// lease is tracked: nothing runs on this node's behalf, and a ping promises
// nothing.
func (d *Deadline) PingBy() (by time.Time, ok bool) {
	at, ok := d.pingBy()
	if !ok {
		return time.Time{}, false
	}
	return d.clock.Out(at), true
}

// pingBy is PingBy on d's clock.
func (d *Deadline) pingBy() (at time.Time, ok bool) {
	if at, ok = d.at(); ok && d.w.Watchdog > 0 {
		at = at.Add(d.w.Margin() - d.w.Watchdog - WatchdogAccuracy)
	}
	return at, ok
}

// MayPing reports whether a watchdog ping sent at now keeps its promise:
// true when no lease is tracked, else now is not past PingBy.
func (d *Deadline) MayPing(now time.Time) bool {
	at, ok := d.pingBy()
	return !ok || !d.clock.Present(now).After(at)
}

// Left is how long until the fence instant, as seen at now (negative once
// passed; zero when nothing is tracked).
func (d *Deadline) Left(now time.Time) time.Duration {
	at, ok := d.at()
	if !ok {
		return 0
	}
	return left(at, 0, d.clock, now)
}

// Expired reports whether the node must fence at now.
func (d *Deadline) Expired(now time.Time) bool {
	at, ok := d.at()
	return !ok || !d.clock.Present(now).Before(at)
}

// LeaseLeft is how long the lease itself (not the fence instant) is still
// guaranteed valid on our clock: fence instant + StopMax + max(Slack,
// Watchdog) - now (Term.LeaseLeft, for the loop's own logs).
func (d *Deadline) LeaseLeft(now time.Time) time.Duration {
	return d.Term(Term{}).LeaseLeft(now)
}
