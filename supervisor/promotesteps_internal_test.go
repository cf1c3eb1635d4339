package supervisor

import (
	"testing"
	"time"
)

func TestPromotionStepsReadAsTheyRan(t *testing.T) {
	t0 := time.Unix(100, 0)
	p := startSteps(t0)
	p.done("barrier", t0.Add(12*time.Millisecond+400*time.Microsecond))
	p.done("token", t0.Add(12*time.Millisecond+450*time.Microsecond))
	p.done("start", t0.Add(330*time.Millisecond))
	if got, want := unitsStartedReason(p), "units started (barrier 12ms, token 100µs, start 318ms)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := unitsStartedReason(nil); got != "units started" {
		t.Errorf("no steps: %q", got)
	}
}
