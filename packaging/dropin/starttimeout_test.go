package dropin

import (
	"testing"
	"time"
)

// defaults is the shipped configuration's start-up budget.
var defaults = StartBudget{Units: 2, StopMax: 3 * time.Second, TTL: 10 * time.Second, ClockRate: 0.01,
	DialTimeout: 2 * time.Second, RequestTimeout: time.Second, PollInterval: time.Second}

// TestStartTimeoutCoversALongTTL: with lease.ttl = 60s a restarted
// supervisor may wait a whole TTL for its old record; the packaged 30 s
// would kill it every time. The drop-in's value must cover that wait plus
// everything else start-up does.
func TestStartTimeoutCoversALongTTL(t *testing.T) {
	long := defaults
	long.TTL = time.Minute
	got, err := StartTimeout(long)
	if err != nil {
		t.Fatal(err)
	}
	need := time.Duration(float64(long.TTL)*(1+long.ClockRate)) + time.Duration(long.Units)*long.StopMax +
		long.DialTimeout + busConnect
	if got < need || got <= DefaultStartTimeout {
		t.Fatalf("StartTimeout(TTL 60s) = %s, want at least %s (and above the packaged %s)", got, need, DefaultStartTimeout)
	}
	if got%time.Second != 0 {
		t.Errorf("StartTimeout = %s, want whole seconds", got)
	}
	t.Logf("TTL 60s: TimeoutStartSec=%s", Seconds(got))

	d, err := StartTimeout(defaults)
	if err != nil {
		t.Fatal(err)
	}
	if d < DefaultStartTimeout || d > got {
		t.Errorf("StartTimeout(defaults) = %s, want between %s and %s", d, DefaultStartTimeout, got)
	}
	t.Logf("defaults: TimeoutStartSec=%s", Seconds(d))
}

func TestStartTimeoutRefusesNonsense(t *testing.T) {
	for _, b := range []StartBudget{
		{TTL: 0},
		{TTL: time.Second, ClockRate: 1},
		{TTL: time.Second, Units: -1},
		{TTL: time.Second, RequestTimeout: -time.Second},
	} {
		if _, err := StartTimeout(b); err == nil {
			t.Errorf("StartTimeout(%+v) succeeded", b)
		}
	}
}
