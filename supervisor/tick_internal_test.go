package supervisor

import (
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// The loop pings at least four times per WatchdogSec, and the waits it makes
// without pinging stay under half of it, whatever the profile's watchdog.
func TestTickAndBlockFollowTheWatchdog(t *testing.T) {
	for _, tc := range []struct {
		watchdog, tick, block500, block200 time.Duration
	}{
		{0, 250 * time.Millisecond, 500 * time.Millisecond, 200 * time.Millisecond},
		{2 * time.Second, 250 * time.Millisecond, 500 * time.Millisecond, 200 * time.Millisecond},
		{time.Second, 200 * time.Millisecond, 300 * time.Millisecond, 200 * time.Millisecond},
		{750 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond, 200 * time.Millisecond}, // "fast"
		{500 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 150 * time.Millisecond},
		{20 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
	} {
		s := &Supervisor{window: fencing.Window{Watchdog: tc.watchdog}}
		if got := tickFor(tc.watchdog); got != tc.tick {
			t.Errorf("WatchdogSec %s: tick %s, want %s", tc.watchdog, got, tc.tick)
		}
		if got := s.blockFor(500 * time.Millisecond); got != tc.block500 {
			t.Errorf("WatchdogSec %s: demotion's gate wait %s, want %s", tc.watchdog, got, tc.block500)
		}
		if got := s.blockFor(200 * time.Millisecond); got != tc.block200 {
			t.Errorf("WatchdogSec %s: fence's gate wait %s, want %s", tc.watchdog, got, tc.block200)
		}
		if w := tc.watchdog; w >= 100*time.Millisecond && (4*tickFor(w) > w || s.blockFor(time.Second)+tickFor(w) > w/2) {
			t.Errorf("WatchdogSec %s: tick %s and wait %s leave no room", w, tickFor(w), s.blockFor(time.Second))
		}
	}
}
