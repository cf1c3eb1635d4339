package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// The history's "units started" event times the promotion's steps from
// the win to the units' start (issue 21 item 5: the drill prints them).
func TestUnitsStartedEventTimesThePromotionSteps(t *testing.T) {
	w := newWorld(t)
	m := w.Start("m1", nil)
	var reason string
	waitFor(t, "m1's units_started event in history", 20*time.Second, func() bool {
		evs, err := group.ReadHistory(context.Background(), w.Admin, m.Sup.Keys(), 0)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Node == "m1" && e.Kind == "units_started" {
				reason = e.Reason
				return true
			}
		}
		return false
	})
	for _, step := range []string{"replay ", "barrier ", "etcd fence ", "record ", "token ", "start "} {
		if !strings.Contains(reason, step) {
			t.Errorf("units_started reason %q lacks the step %q", reason, step)
		}
	}
	if !strings.HasPrefix(reason, "units started (") {
		t.Errorf("reason %q: want it to begin as before, \"units started\"", reason)
	}
}
