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
		{"watchdog longer than slack", Window{ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * ms, Watchdog: 2 * time.Second}, 10 * time.Second, 4900 * ms},
		{"watchdog shorter than slack", Window{ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * ms, Watchdog: 200 * ms}, 10 * time.Second, 6400 * ms},
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
