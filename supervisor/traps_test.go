package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
)

// Values put by hand that no member would write must not stop every member
// from campaigning, silently and forever.

func TestMalformedControlValueDoesNotFreezeTheGroup(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	keys := leader.Sup.Keys()
	if _, err := w.Admin.Put(context.Background(), keys.Handoff(), "{to: m2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby to report the unreadable record", 5*time.Second, func() bool {
		p := standby.Sup.Status().Problems
		return len(p) > 0 && strings.Contains(p[0], keys.Handoff()) && strings.Contains(p[0], "etcdctl del")
	})
	// The leader goes; the standby must still take over.
	leader.Cancel()
	if err := leader.WaitExit(t, 10*time.Second, "stop"); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	leaderOf(t, standby)
	assertNoOverlap(t, a, b)
}

func TestHandPutElectionKeyWithoutLeaseIsCleared(t *testing.T) {
	w := newWorld(t)
	cfg := supervisortest.FastConfig("m0")
	keys := group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster)
	put, err := w.Admin.Put(context.Background(), keys.Leader(), "m9")
	if err != nil {
		t.Fatal(err)
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, _ := leaderOf(t, a, b)
	resp, err := w.Admin.Get(context.Background(), keys.Leader())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read election key: %v %v", resp, err)
	}
	if kv := resp.Kvs[0]; kv.Lease == 0 || kv.CreateRevision <= put.Header.Revision || string(kv.Value) != leader.Name {
		t.Fatalf("election key %q (lease %x, token %d): want %s's key on a lease, after the hand-put one (revision %d)",
			kv.Value, kv.Lease, kv.CreateRevision, leader.Name, put.Header.Revision)
	}
	assertNoOverlap(t, a, b)
}

// A holder whose key is rewritten by hand onto no lease (etcdctl put keeps
// the CreateRevision, so the token is unchanged) no longer has a key that
// lapses with its lease: it fences, and the group recovers.
func TestHolderFencesWhenItsKeyIsRewrittenWithoutLease(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	if _, err := w.Admin.Put(context.Background(), leader.Sup.Keys().Leader(), leader.Name); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitExit(t, 10*time.Second, "fence"); err == nil {
		t.Fatal("Run returned nil, want a FenceError")
	}
	leaderOf(t, others[0])
	assertNoOverlap(t, a, b)
}
