package supervisor_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// electionLease reads the election key and returns its lease.
func electionLease(t *testing.T, admin *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := admin.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read election key: %v (%d keys)", err, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

func leaseAlive(t *testing.T, admin *clientv3.Client, id clientv3.LeaseID) bool {
	t.Helper()
	resp, err := admin.TimeToLive(context.Background(), id)
	if err != nil {
		t.Fatalf("TimeToLive %x: %v", id, err)
	}
	return resp.TTL > 0
}

// TestFenceRevokesElectionLease (issue 11 item 3): a holder that fences
// while etcd still answers gives its election lease back once its units are
// confirmed down, so nobody has to wait out the TTL. Here the election key
// is deleted by hand; the holder fences, and its lease must be gone right
// after it exits, and the peer must lead well under one TTL later.
func TestFenceRevokesElectionLease(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	key := leader.Sup.Keys().Leader()
	lease := electionLease(t, w.Admin, key)
	deletedAt := time.Now()
	if _, err := w.Admin.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	var fe *supervisor.FenceError
	if err := leader.WaitExit(t, 10*time.Second, "fence after its key was deleted"); !errors.As(err, &fe) || fe.Incomplete != nil {
		t.Fatalf("Run returned %v, want a complete FenceError", err)
	}
	exited := time.Since(deletedAt)
	alive := leaseAlive(t, w.Admin, lease)
	leaderOf(t, others[0])
	started := firstStartAfter(others[0], deletedAt)
	ttl := 4 * time.Second
	t.Logf("key deleted at 0; old leader exited at +%s, its election lease alive after exit: %v; peer's units at +%s (TTL %s)",
		exited.Round(time.Millisecond), alive, started.Sub(deletedAt).Round(time.Millisecond), ttl)
	if alive {
		t.Fatalf("election lease %x still alive after the fence: the peer would wait out the TTL", lease)
	}
	if got := started.Sub(deletedAt); got > ttl/2 {
		t.Fatalf("peer started its units %s after the fence, not well under one TTL (%s)", got, ttl)
	}
	assertNoOverlap(t, a, b)
}

// TestDrillFenceKeepsElectionLease: `drill failover` rehearses a node that
// went silent, so its fence must NOT revoke the lease: the peer waits.
func TestDrillFenceKeepsElectionLease(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	lease := electionLease(t, w.Admin, leader.Sup.Keys().Leader())
	d := group.Drill{ID: "t1", Kind: "failover", Token: leader.Sup.Status().Token, At: time.Now()}
	body, _ := json.Marshal(d)
	if _, err := w.Admin.Put(context.Background(), leader.Sup.Keys().Drill(), string(body)); err != nil {
		t.Fatal(err)
	}
	var fe *supervisor.FenceError
	if err := leader.WaitExit(t, 10*time.Second, "fence for the drill"); !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	if !leaseAlive(t, w.Admin, lease) {
		t.Fatalf("the drill's fence revoked election lease %x; a drill must rehearse the full lease wait", lease)
	}
	leaderOf(t, others[0])
	assertNoOverlap(t, a, b)
}
