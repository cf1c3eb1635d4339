package supervisor

import (
	"testing"
	"time"
)

// The first failure of a run warns, then one every renewWarnEvery; the least
// time left to the fence is kept across the run.
func TestRenewStreakWarnsAtTheStartAndThenEveryFewSeconds(t *testing.T) {
	var r renewStreak
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	every := 250 * time.Millisecond
	var warnedAt []time.Duration
	for i := range 48 { // 12 s of failures
		at := time.Duration(i) * every
		if r.fail(t0.Add(at), 3*time.Second-at/4) {
			warnedAt = append(warnedAt, at)
		}
	}
	want := []time.Duration{0, renewWarnEvery, 2 * renewWarnEvery}
	if len(warnedAt) != len(want) || warnedAt[0] != want[0] || warnedAt[1] != want[1] || warnedAt[2] != want[2] {
		t.Fatalf("warned at %v, want %v", warnedAt, want)
	}
	if r.failed != 48 || !r.since.Equal(t0) || r.least != 3*time.Second-47*every/4 {
		t.Fatalf("run %+v: want 48 failures since %s, least %s", r, t0, 3*time.Second-47*every/4)
	}
}
