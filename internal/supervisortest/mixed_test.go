package supervisortest

import (
	"errors"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// Members on different profiles, as while a profile is changed node by node
// (docs/operations.md, "Changing the profile"): real etcd, a fast-kill
// member and a fast one. Whichever leads is cut off; it fences, and the
// other takes over without overlap, its barrier reasoning with the old
// leader's published timing (group.Timing); then the same the other way
// round. The decisions themselves are TestLeaseProofUsesTheHoldersMargin
// and its neighbours in the supervisor package.
func TestMixedProfilesTakeOverWithoutOverlap(t *testing.T) {
	w := NewWorld(t, 1)
	a, b := w.Start("m1", useProfile(t, "fast-kill")), w.Start("m2", useProfile(t, "fast"))
	leader, others := LeaderOf(t, a, b)
	for round := 1; round <= 2; round++ {
		cutAt := time.Now()
		leader.Cut(true)
		err := leader.WaitExit(t, 20*time.Second, "fence when cut off")
		var fe *supervisor.FenceError
		if !errors.As(err, &fe) {
			t.Fatalf("round %d: %s returned %v, want a FenceError", round, leader.Name, err)
		}
		next, _ := LeaderOf(t, others[0])
		stopped, started := LastStop(leader), FirstStartAfter(next, cutAt)
		t.Logf("round %d: %s (%s) cut at 0, units down at +%s; %s took over, units at +%s",
			round, leader.Name, map[string]string{"m1": "fast-kill", "m2": "fast"}[leader.Name],
			stopped.Sub(cutAt).Round(time.Millisecond), next.Name, started.Sub(cutAt).Round(time.Millisecond))
		if !stopped.Before(started) {
			t.Fatalf("round %d: new units at %s, before the old ones stopped at %s", round, started, stopped)
		}
		AssertNoOverlap(t, a, b)
		if round == 2 {
			break
		}
		// The cut member back, as a fresh standby of its own profile.
		leader.Cut(false)
		profile := map[string]string{"m1": "fast-kill", "m2": "fast"}[leader.Name]
		back := w.Start(leader.Name, useProfile(t, profile))
		if leader == a {
			a = back
		} else {
			b = back
		}
		WaitFor(t, "the cut member back as standby", 20*time.Second, func() bool { return back.State() == group.Standby })
		leader, others = next, []*Member{back}
	}
}
