package fencing

import (
	"strings"
	"testing"
	"time"
)

var defaults = Window{TTL: 10 * time.Second, ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * time.Millisecond}

func TestSpan(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		w    Window
		ttl  time.Duration
		want time.Duration
	}{
		{"defaults", defaults, 10 * time.Second, 6400 * ms},
		{"fast profile", Window{ClockRate: 0.01, StopMax: 1500 * ms, Slack: 500 * ms}, 4 * time.Second, 1960 * ms},
		{"no clock error", Window{StopMax: 3 * time.Second, Slack: 500 * ms}, 10 * time.Second, 6500 * ms},
		{"server granted a shorter TTL than asked", defaults, 8 * time.Second, 4420 * ms},
		{"lease gone", defaults, 0, 0},
		// The watchdog's kill may come WatchdogAccuracy (250 ms) late.
		{"watchdog longer than slack", Window{ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * ms, Watchdog: 2 * time.Second}, 10 * time.Second, 4650 * ms},
		{"watchdog shorter than slack", Window{ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * ms, Watchdog: 200 * ms}, 10 * time.Second, 6400 * ms},
		{"fast-kill, the watchdog the backstop", fastKill, 4 * time.Second, 3210 * ms},
		{"fast-kill, the watchdog in the margin", noBackstop(fastKill), 4 * time.Second, 2910 * ms},
		// A backstop without a watchdog is none: the slack a loop
		// without a watchdog needs (500 ms) applies.
		{"backstop without a watchdog", Window{ClockRate: 0.01, StopMax: 250 * ms, Slack: 200 * ms, Backstop: true}, 4 * time.Second, 3210 * ms},
		{"fast-kill without a watchdog", withWatchdog(fastKill, 0), 4 * time.Second, 3160 * ms},
		{"backstop with a watchdog", Window{ClockRate: 0.01, StopMax: 250 * ms, Slack: 200 * ms, Watchdog: 100 * ms, Backstop: true}, 4 * time.Second, 3510 * ms},
	} {
		if got := tc.w.Span(tc.ttl); got != tc.want {
			t.Errorf("%s: Span(%s) = %s, want %s", tc.name, tc.ttl, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		w     Window
		renew time.Duration
		err   string
	}{
		{"defaults", defaults, time.Second, ""},
		{"fast", Window{TTL: 4 * time.Second, ClockRate: 0.01, StopMax: 1500 * ms, Slack: 500 * ms}, 500 * ms, ""},
		{"exactly two renewals fits", Window{TTL: 10 * time.Second, StopMax: 5 * time.Second, Slack: time.Second}, 2 * time.Second, ""},
		{"window under two renewals", Window{TTL: 10 * time.Second, ClockRate: 0.01, StopMax: 8 * time.Second, Slack: 500 * ms}, time.Second, "under two renew intervals"},
		{"negative window", Window{TTL: 2 * time.Second, StopMax: 3 * time.Second}, time.Second, "under two renew intervals"},
		{"zero ttl", Window{StopMax: time.Second}, time.Second, "TTL"},
		{"absurd clock error", Window{TTL: 10 * time.Second, ClockRate: 0.6, StopMax: time.Second}, time.Second, "clock rate"},
		{"zero stop budget", Window{TTL: 10 * time.Second}, time.Second, "stop budget"},
		{"zero renew", defaults, 0, "renew interval"},
		{"fast profile with a 2s watchdog", Window{TTL: 4 * time.Second, ClockRate: 0.01, StopMax: 1500 * ms, Slack: 500 * ms, Watchdog: 2 * time.Second}, 500 * ms, "WatchdogSec 2s"},
		{"fast profile with a 1s watchdog", Window{TTL: 4 * time.Second, ClockRate: 0.01, StopMax: 1500 * ms, Slack: 500 * ms, Watchdog: time.Second}, 500 * ms, ""},
		{"fast-kill", fastKill, 250 * ms, ""},
		// Under a backstop the window does not shrink with the watchdog,
		// but the pings must still cover two renewals.
		{"fast-kill with a 2.91s watchdog", withWatchdog(fastKill, 2910*ms), 250 * ms, ""},
		{"fast-kill with a 3s watchdog", withWatchdog(fastKill, 3000*ms), 250 * ms, "WatchdogSec 3s"},
	} {
		err := tc.w.Validate(tc.renew)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
}

func TestDeadline(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := time.Second

	d := NewDeadlineClock(defaults, IdentityClock{})
	if !d.Expired(t0) {
		t.Fatal("no proof yet must mean expired")
	}
	d.Renewed("election", t0, 10*s)
	if got, _ := d.At(); !got.Equal(at(6400 * time.Millisecond)) {
		t.Fatalf("fence_at = %v after t0, want 6.4s", got.Sub(t0))
	}
	if d.Expired(at(6399*time.Millisecond)) || !d.Expired(at(6400*time.Millisecond)) {
		t.Fatal("expiry must flip exactly at fence_at")
	}
	// A renewal sent later moves the deadline; an older answer arriving
	// late does not move it back.
	d.Renewed("election", at(2*s), 10*s)
	d.Renewed("election", at(1*s), 10*s)
	if got := d.Left(t0); got != 8400*time.Millisecond {
		t.Fatalf("Left = %s, want 8.4s", got)
	}
	// The earliest lease governs.
	d.Renewed("member", at(1*s), 10*s)
	if got := d.Left(t0); got != 7400*time.Millisecond {
		t.Fatalf("Left with member lease = %s, want 7.4s", got)
	}
	// The guaranteed lease time is the fence instant plus the stop budget.
	if got := d.LeaseLeft(t0); got != 10900*time.Millisecond {
		t.Fatalf("LeaseLeft = %s, want 10.9s", got)
	}
	d.Forget("member")
	if got := d.Left(t0); got != 8400*time.Millisecond {
		t.Fatalf("Left after Forget = %s, want 8.4s", got)
	}
	// A zero TTL means the lease is gone: fence now, even over a later proof.
	d.Renewed("election", at(3*s), 0)
	if !d.Expired(at(3 * s)) {
		t.Fatal("zero TTL must expire at once")
	}
}

func TestValidateHugeRenewDoesNotOverflow(t *testing.T) {
	if err := defaults.Validate(time.Duration(1<<62) + 1); err == nil {
		t.Fatal("a renew interval of ~146 years must be refused, not wrap around")
	}
}

// fast-kill's window: TTL 4 s, S_max 0.3 s, slack 0.45 s, WatchdogSec 0.5 s
// as the backstop.
var fastKill = Window{TTL: 4 * time.Second, ClockRate: 0.01, StopMax: 300 * time.Millisecond, Slack: 450 * time.Millisecond, Watchdog: 500 * time.Millisecond, Backstop: true}

func noBackstop(w Window) Window                    { w.Backstop = false; return w }
func withWatchdog(w Window, d time.Duration) Window { w.Watchdog = d; return w }

// A ping is a promise that systemd's kill (W, and up to A = 250 ms more)
// and the units' stop land before the lease could lapse: ping_by = t_s +
// TTL*(1-rho) - S_max - W - A. Without a backstop the margin covers W + A
// and the pings may go on to the fence instant; with one they stop W + A -
// delta before it.
func TestPingSpanAndPingBy(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name           string
		w              Window
		span, pingSpan time.Duration
		margin         time.Duration
		backstopped    bool
	}{
		{"fast-kill", fastKill, 3210 * ms, 2910 * ms, 450 * ms, true},
		{"fast-kill without the backstop", noBackstop(fastKill), 2910 * ms, 2910 * ms, 750 * ms, false},
		{"default under its 2s watchdog", withWatchdog(defaults, 2*time.Second), 4650 * ms, 4650 * ms, 2250 * ms, false},
		{"watchdog and its timer under slack", withWatchdog(defaults, 200*ms), 6400 * ms, 6450 * ms, 500 * ms, false},
		{"no watchdog", defaults, 6400 * ms, 6400 * ms, 500 * ms, false},
		{"backstop, watchdog and its timer under slack", withWatchdog(Window{TTL: 4 * time.Second, ClockRate: 0.01, StopMax: 250 * ms, Slack: 400 * ms, Backstop: true}, 100*ms), 3310 * ms, 3360 * ms, 400 * ms, false},
	} {
		w := tc.w
		if got := w.Span(w.TTL); got != tc.span {
			t.Errorf("%s: Span = %s, want %s", tc.name, got, tc.span)
		}
		if got := w.PingSpan(w.TTL); got != tc.pingSpan {
			t.Errorf("%s: PingSpan = %s, want %s", tc.name, got, tc.pingSpan)
		}
		if got := w.Margin(); got != tc.margin {
			t.Errorf("%s: Margin = %s, want %s", tc.name, got, tc.margin)
		}
		if got := w.Backstopped(); got != tc.backstopped {
			t.Errorf("%s: Backstopped = %v, want %v", tc.name, got, tc.backstopped)
		}
		// Whatever the mode, a ping never promises more than the lease
		// holds: ping_by + W + A + S_max <= t_s + TTL*(1-rho).
		if w.Watchdog > 0 {
			if end := w.PingSpan(w.TTL) + w.Watchdog + WatchdogAccuracy + w.StopMax; end > w.Span(w.TTL)+w.StopMax+w.Margin() {
				t.Errorf("%s: a ping at PingSpan is killed at %s + S_max, past the lease's guaranteed end %s", tc.name, end, w.Span(w.TTL)+w.StopMax+w.Margin())
			}
		}

		d := NewDeadlineClock(w, IdentityClock{})
		if !d.MayPing(time.Now()) {
			t.Errorf("%s: MayPing false with no lease tracked", tc.name)
		}
		if _, ok := d.PingBy(); ok {
			t.Errorf("%s: PingBy ok with no lease tracked", tc.name)
		}
		sent := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
		d.Renewed("election", sent, w.TTL)
		by, ok := d.PingBy()
		if !ok || !by.Equal(sent.Add(tc.pingSpan)) {
			t.Errorf("%s: PingBy = %s, %v; want t_s + %s", tc.name, by.Sub(sent), ok, tc.pingSpan)
		}
		if !d.MayPing(by) || d.MayPing(by.Add(time.Nanosecond)) {
			t.Errorf("%s: MayPing at PingBy %v, just after %v; want true, false", tc.name, d.MayPing(by), d.MayPing(by.Add(time.Nanosecond)))
		}
		// The earliest lease decides.
		d.Renewed("member", sent.Add(-time.Second), w.TTL)
		if by2, _ := d.PingBy(); !by2.Equal(by.Add(-time.Second)) {
			t.Errorf("%s: with an older member lease PingBy = t_s + %s, want t_s + %s", tc.name, by2.Sub(sent), by.Add(-time.Second).Sub(sent))
		}
	}
}
