package supervisor_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// ttl is the lease TTL of supervisortest.FastConfig.
const ttl = 4 * time.Second

// profiles are the fast profile (the harness's) and the default one.
var profiles = []struct {
	name  string
	ttl   time.Duration
	tweak func(*config.Config)
}{
	{"fast", ttl, nil},
	{"default", 10 * time.Second, func(c *config.Config) {
		d := config.Default()
		c.Etcd.RequestTimeout, c.Lease = d.Etcd.RequestTimeout, d.Lease
		c.Units.StopTimeout, c.Units.KillGrace, c.Units.PollInterval = d.Units.StopTimeout, d.Units.KillGrace, d.Units.PollInterval
	}},
}

// cutLeaderWith cuts the leader off from every etcd member except keep,
// which stays reachable for it (and for everyone else).
func cutLeaderWith(leader *member, keep int) {
	for i, p := range leader.Proxies {
		if i != keep {
			p.Blackhole(true)
		}
	}
}

// takeoverDuring checks that next takes over while a fault that began at
// cutAt still lasts (for lasts), soon after the old lease can have expired,
// and that the old leader fenced first. It returns the takeover time.
func takeoverDuring(t *testing.T, old, next *member, cutAt time.Time, ttl, lasts time.Duration) time.Duration {
	t.Helper()
	err := old.WaitExit(t, 2*ttl+10*time.Second, "fence when cut off")
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) || fe.Incomplete != nil {
		t.Fatalf("old leader's Run returned %v, want a complete FenceError", err)
	}
	// Generous against a loaded machine: the lease expires about TTL after
	// the cut, then one poll, a grant and a campaign; what matters is
	// that the takeover does not wait for the fault to end.
	bound := ttl + 4*time.Second
	waitFor(t, "takeover while the fault lasts", lasts, func() bool {
		return next.State() == group.Active && next.Units.Running(units[0]) && next.Units.Running(units[1])
	})
	started := firstStartAfter(next, cutAt)
	took := started.Sub(cutAt)
	t.Logf("cut at 0; old units stopped at +%s; new units started at +%s (TTL %s)",
		lastStop(old).Sub(cutAt).Round(time.Millisecond), took.Round(time.Millisecond), ttl)
	if took > bound {
		t.Fatalf("takeover took %s after the cut, more than TTL + 4 s (%s)", took.Round(time.Millisecond), bound)
	}
	assertNoOverlap(t, old, next)
	return took
}

// TestMinorityPartitionTakeover: the leader and one etcd member are cut off
// from the other two members; the standby still reaches all three, the
// cut-off one included, which has no raft leader any more. Every request
// that decides or observes leadership must fail fast there and move on, so
// the standby takes over about one TTL after the cut, not when the
// partition heals (before: only at the heal).
func TestMinorityPartitionTakeover(t *testing.T) {
	// The etcd raft leader in the minority also makes the majority elect
	// a new one, which extends every lease (etcd's lessor promotion).
	for _, prof := range profiles {
		for _, which := range []string{"follower", "raft-leader"} {
			t.Run(prof.name+"/"+which, func(t *testing.T) {
				w := newWorld(t)
				a, b := w.Start("m1", prof.tweak), w.Start("m2", prof.tweak)
				leader, others := leaderOf(t, a, b)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				raftLeader, err := w.Cluster.WaitLeader(ctx)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				minority := (raftLeader + 1) % w.Cluster.Size()
				if which == "raft-leader" {
					minority = raftLeader
				}
				lasts := 4 * prof.ttl // longer than two TTLs
				cutAt := time.Now()
				cutLeaderWith(leader, minority)
				w.Cluster.Member(minority).Isolate()
				defer w.Cluster.Member(minority).Heal()
				takeoverDuring(t, leader, others[0], cutAt, prof.ttl, lasts)
				if w.Cluster.Member(minority).HasLeader() {
					t.Fatal("the isolated etcd member still has a leader: the partition did not happen")
				}
			})
		}
	}
}

// TestTakeoverThroughASilentMember: the leader is cut off from etcd
// entirely, and one etcd member is silent for the standby (its bytes are
// held, as with a blackhole route; gRPC notices only after its keepalive).
// The standby's grant, campaign and reads must not wait on that member.
func TestTakeoverThroughASilentMember(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	cutAt := time.Now()
	leader.Cut(true)
	others[0].Proxies[0].Blackhole(true)
	takeoverDuring(t, leader, others[0], cutAt, ttl, 4*ttl)
}

// TestPromotionResetsTheConnectionsToSilentMembers: the standby that takes
// over while one etcd member is silent for it (issue 21's minority
// partition) destroys its host's connections to that member and to no
// other (etcd.reset_silent); the first leader, promoted with every
// member answering, resets nothing.
func TestPromotionResetsTheConnectionsToSilentMembers(t *testing.T) {
	w := newWorld(t)
	var (
		mu    sync.Mutex
		calls = map[string][][]string{}
	)
	w.Options = func(name string, o *supervisor.Options) {
		o.ResetConnectionsTo = func(eps []string) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			calls[name] = append(calls[name], eps)
			return 2, nil
		}
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	next := others[0]
	cutAt := time.Now()
	leader.Cut(true)
	next.Proxies[0].Blackhole(true)
	takeoverDuring(t, leader, next, cutAt, ttl, 4*ttl)
	silent := "http://" + next.Proxies[0].Addr()
	waitFor(t, "the new leader's reset", 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls[next.Name]) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if got := calls[leader.Name]; len(got) != 0 {
		t.Errorf("%s reset %v when promoted with every member answering", leader.Name, got)
	}
	if got := calls[next.Name]; len(got) != 1 || len(got[0]) != 1 || got[0][0] != silent {
		t.Errorf("%s reset %v at its promotion, want [[%s]] (the silent member only)", next.Name, got, silent)
	}
}

// TestLeaderResetsTheConnectionsToAMemberThatGoesSilent: while it leads, a
// member that stops answering (a stalled etcd leader, lab scenario 68) has
// this host's connections to it reset once it was silent for two looks,
// once per silence; a leader cut off from every member resets nothing (its
// fence handles that).
func TestLeaderResetsTheConnectionsToAMemberThatGoesSilent(t *testing.T) {
	w := newWorld(t)
	var (
		mu    sync.Mutex
		calls [][]string
	)
	w.Options = func(_ string, o *supervisor.Options) {
		o.ResetConnectionsTo = func(eps []string) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, eps)
			return 1, nil
		}
	}
	a := w.Start("m1", nil)
	leaderOf(t, a)
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(calls) }
	time.Sleep(2 * time.Second)
	if n := count(); n != 0 {
		t.Fatalf("%d resets with every member answering", n)
	}
	silent := "http://" + a.Proxies[1].Addr()
	for round := 1; round <= 2; round++ {
		a.Proxies[1].Blackhole(true)
		waitFor(t, "the reset of the silent member", 10*time.Second, func() bool { return count() == round })
		time.Sleep(3 * time.Second) // still silent: no second reset
		a.Proxies[1].Blackhole(false)
		time.Sleep(2 * time.Second) // answered again: the next silence is reset again
	}
	mu.Lock()
	got := append([][]string(nil), calls...)
	mu.Unlock()
	if len(got) != 2 || len(got[0]) != 1 || got[0][0] != silent || len(got[1]) != 1 || got[1][0] != silent {
		t.Fatalf("resets %v, want [[%s] [%s]]: once per silence", got, silent, silent)
	}
	a.Cut(true)
	_ = a.WaitExit(t, 3*ttl, "fence when cut off")
	if n := count(); n != 2 {
		t.Fatalf("%d resets after the leader was cut off from every member, want none more", n-2)
	}
}

// TestForeignEndpointNeverFencesTheHolder: each member's pool also holds a
// client of another etcd cluster (an endpoint that was down at start-up,
// or was replaced since). That member answers every renewal at once with
// "lease not found", which must never count: the leader keeps leading.
func TestForeignEndpointNeverFencesTheHolder(t *testing.T) {
	w := newWorld(t)
	other := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	foreign := other.Client(t)
	ours := w.Cluster.Member(0).ClusterID()
	w.Options = func(_ string, o *supervisor.Options) {
		clients := append([]*clientv3.Client{foreign}, o.Pool.Clients()...)
		p, err := etcdconn.NewPool(clients, etcdconn.PoolOptions{ClusterID: ours})
		if err != nil {
			t.Fatal(err)
		}
		o.Pool = p
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	supervisortest.StaysLeader(t, leader, others[0], 3*ttl, "with an endpoint of another etcd cluster", nil)
	assertNoOverlap(t, a, b)
	st := leader.Sup.Status()
	if len(st.ForeignEndpoints) != 1 || st.ForeignEndpoints[0] != other.Endpoints()[0] || len(st.Warnings()) != 1 {
		t.Fatalf("status: foreign endpoints %v, warnings %v; want %s named", st.ForeignEndpoints, st.Warnings(), other.Endpoints()[0])
	}
	t.Logf("warning: %s", st.Warnings()[0])
}
