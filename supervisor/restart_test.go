package supervisor_test

import (
	"testing"
	"time"
)

// A leader killed without a chance to release leaves its key on a live
// lease. Its successor (systemd restarts it within about a second) knows
// that lease from the run state, confirms its units are down, and gives the
// lease back, so the peer takes over at once instead of after the TTL.
func TestRestartedMemberGivesBackItsPredecessorsLease(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	peer := others[0]
	killedAt := time.Now()
	leader.Kill()
	successor := w.Start(leader.Name, nil)
	leaderOf(t, peer, successor)
	if peer.State() != "active" {
		t.Fatalf("the restarted member won, not the peer")
	}
	took := firstStartAfter(peer, killedAt).Sub(killedAt)
	t.Logf("leader killed at 0; its units down at +%s; the peer's units at +%s (TTL 4s)",
		lastStop(leader).Sub(killedAt).Round(time.Millisecond), took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Fatalf("the peer took over %s after the kill: the predecessor's lease was waited out (TTL 4s), not given back", took)
	}
	assertNoOverlap(t, leader, peer, successor)
}
