package supervisortest

import (
	"context"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// stalls is how many etcd leader losses the leader must ride out; the
// election after each takes a random 1-2 s, so several rounds sample more of
// that range than one would.
const stalls = 3

// stallFor is how long the etcd raft leader is gone each time, as in the
// issue (a SIGSTOP, a long fsync or GC pause).
const stallFor = 3 * time.Second

// The fast profile, as shipped (with its supervisor unit's WatchdogSec in the
// fence window, as under systemd), keeps its leader through an etcd leader
// loss on a stock etcd (100 ms heartbeat, 1 s election timeout). The etcd
// leader is stalled for 3 s (etcdtest's Stall: raft stopped, no leadership
// transfer, so the others elect a new leader only after their randomised
// election timeout, and its peer traffic held, so its lessor answers no
// forwarded renewal), and every supervisor's connections to it are
// blackholed, so that their requests to it hang as they would to a stopped
// process instead of being refused.
//
// Both fast profiles: "fast" and "fast-kill" (units killed at once, TTL 4 s,
// WatchdogSec=500ms).
func TestFastProfileSurvivesEtcdLeaderLoss(t *testing.T) {
	for _, name := range []string{"fast", "fast-kill"} {
		t.Run(name, func(t *testing.T) { survivesEtcdLeaderLoss(t, name) })
	}
}

func survivesEtcdLeaderLoss(t *testing.T, profile string) {
	w := NewWorldWith(t, etcdtest.Options{Members: 3, Timing: etcdtest.Stock, StallablePeers: true})
	p := config.Profiles[profile]
	w.Options = func(_ string, o *supervisor.Options) { o.Watchdog = p.Watchdog }
	a, b := w.Start("m1", useProfile(t, profile)), w.Start("m2", useProfile(t, profile))
	leader, others := LeaderOf(t, a, b)
	for round := 1; round <= stalls; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		idx, err := w.Cluster.WaitLeader(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		closest := time.Duration(1<<63 - 1)
		watch := func() { closest = min(closest, leader.Sup.Status().FenceIn) }
		before := leader.RenewFailures.Load()
		member := w.Cluster.Member(idx)
		start := time.Now()
		for _, m := range []*Member{a, b} {
			m.Proxies[idx].Blackhole(true)
		}
		stalled := make(chan error, 1)
		go func() { stalled <- member.Stall() }()
		elected := make(chan time.Duration, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := w.Cluster.WaitLeader(ctx); err != nil {
				elected <- -1
				return
			}
			elected <- time.Since(start)
		}()
		done := make(chan error, 1)
		go func() {
			time.Sleep(stallFor)
			// Letting the supervisors' connections through again lets the
			// stopped member's servers finish closing; only then can it
			// restart on its ports.
			for _, m := range []*Member{a, b} {
				m.Proxies[idx].Blackhole(false)
			}
			if err := <-stalled; err != nil {
				done <- err
				return
			}
			done <- member.Restart()
		}()
		// The stall, and as long again after it: a proof lost during the
		// stall would fence within one fence window of it.
		StaysLeader(t, leader, others[0], 2*stallFor, "through an etcd leader loss on stock etcd timing", watch)
		if err := <-done; err != nil {
			t.Fatalf("round %d: stall etcd member %d: %v", round, idx, err)
		}
		t.Logf("%s round %d: etcd leader %d stopped for %s, new etcd leader after %s; %s kept its units; %d renewals failed; closest to its fence: %s left",
			profile, round, idx, stallFor, (<-elected).Round(time.Millisecond), leader.Name, leader.RenewFailures.Load()-before, closest.Round(time.Millisecond))
	}
	for _, u := range Units {
		if n := starts(leader, u); n != 1 {
			t.Errorf("%s started %s %d times; want once, never stopped", leader.Name, u, n)
		}
	}
	AssertNoOverlap(t, a, b)
}

// useFast sets every value the fast profile owns, as `profile = "fast"`
// in a file would.
func useFast(t *testing.T) func(*config.Config) { return useProfile(t, "fast") }

// useProfile sets every value the named profile owns, as `profile = NAME`
// in a file would.
func useProfile(t *testing.T, name string) func(*config.Config) {
	return func(c *config.Config) {
		if err := c.UseProfile(name); err != nil {
			t.Fatal(err)
		}
	}
}

func starts(m *Member, unit string) int {
	n := 0
	for _, e := range m.Units.Snapshot() {
		if e.Unit == unit && e.What == "started" {
			n++
		}
	}
	return n
}
