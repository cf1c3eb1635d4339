package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// After a failure threshold the leader demotes and sits out its cooldown so
// that another member gets the chance; when no other member can take it
// (here the other one leaves), a flaky component beats none: the node in
// cooldown campaigns, and says so.
func TestCooldownYieldsWhenNobodyElseCan(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	flaky, other := leader, others[0]
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if flaky.Units.Running(units[1]) {
				flaky.Units.Crash(units[1])
			}
		}
	}()
	waitFor(t, "the other member to take over", 30*time.Second, func() bool { return other.State() == group.Active })
	close(stop)
	// The demotion releases the key before it ends: let it finish.
	waitFor(t, "the flaky node to be standby", 10*time.Second, func() bool { return flaky.State() == group.Standby })
	if st := flaky.Sup.Status(); st.State != group.Standby || !st.CooldownUntil.After(time.Now().Add(10*time.Second)) {
		t.Fatalf("flaky node %s, cooldown until %v: want standby with most of its 30 s cooldown ahead", st.State, st.CooldownUntil)
	}
	other.Cancel()
	if err := other.WaitExit(t, 10*time.Second, "stop"); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	waitFor(t, "the node in cooldown to take over", 15*time.Second, func() bool { return leaderActive(flaky) })
	st := flaky.Sup.Status()
	if !st.CooldownOverride || !st.CooldownUntil.After(time.Now()) {
		t.Fatalf("status %+v: want a cooldown override mark while the cooldown lasts", st)
	}
	evs, err := group.ReadHistory(context.Background(), w.Admin, flaky.Sup.Keys(), 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "cooldown_override" && e.Node == flaky.Name)
	}
	if !found {
		t.Fatalf("no cooldown_override event in the history: %+v", evs)
	}
	assertNoOverlap(t, a, b)
}

func leaderActive(m *member) bool {
	return m.State() == group.Active && m.Units.Running(units[0]) && m.Units.Running(units[1])
}
