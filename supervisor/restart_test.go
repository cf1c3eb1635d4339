package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
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
	// The wait it guards against is a lease, 3.5-4 s; the give-back on a
	// loaded machine can take more than 2 s.
	if took > 3*time.Second {
		t.Fatalf("the peer took over %s after the kill: the predecessor's lease was waited out (TTL 4s), not given back", took)
	}
	assertNoOverlap(t, leader, peer, successor)
}

// A failover drill fences as if renewals had failed and keeps its lease, so
// that the group rehearses the full lease wait. Its successor, restarted by
// systemd, must not give that lease back early.
func TestSuccessorKeepsADrillsLease(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	peer := others[0]
	st := leader.Sup.Status()
	d := group.Drill{ID: group.NewID(), Kind: "failover", Token: st.Token, At: time.Now()}
	if err := group.RequestDrill(context.Background(), w.Admin, leader.Sup.Keys(), d, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	drillAt := time.Now()
	if err := leader.WaitExit(t, 10*time.Second, "fence for the drill"); err == nil {
		t.Fatal("Run returned nil, want a FenceError")
	}
	successor := w.Start(leader.Name, nil)
	next, _ := leaderOf(t, peer, successor)
	took := firstStartAfter(next, drillAt).Sub(drillAt)
	t.Logf("drill at 0; %s's units at +%s (TTL 4s)", next.Name, took.Round(time.Millisecond))
	if took < 3*time.Second {
		t.Fatalf("%s took over %s after the drill: the drill's lease was given back early", next.Name, took)
	}
	assertNoOverlap(t, leader, peer, successor)
}
