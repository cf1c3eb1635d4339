package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// The promotion barrier must not take a missing record for "nothing runs":
// each test removes the leader's traces in etcd in another way while its
// scheduler takes its whole SIGTERM budget to stop, and checks that the
// new leader starts nothing before the old units are down.

func TestBarrierWaitsWhenKeyAndRecordAreDeletedTogether(t *testing.T) {
	barrierCase(t, func(w *world, leader *member) {
		k := leader.Sup.Keys()
		if _, err := w.Admin.Txn(context.Background()).Then(
			clientv3.OpDelete(k.Leader()), clientv3.OpDelete(k.Member(leader.Name))).Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBarrierWaitsWhenThePrefixIsWiped(t *testing.T) {
	barrierCase(t, func(w *world, leader *member) {
		if _, err := w.Admin.Delete(context.Background(), leader.Sup.Keys().Root+"/", clientv3.WithPrefix()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBarrierWaitsWhenBothLeasesAreRevoked(t *testing.T) {
	barrierCase(t, func(w *world, leader *member) {
		k := leader.Sup.Keys()
		ctx := context.Background()
		for _, key := range []string{k.Leader(), k.Member(leader.Name)} {
			resp, err := w.Admin.Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
				t.Fatalf("read %s: %v %v", key, resp, err)
			}
			if _, err := w.Admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// barrierCase runs a group of two, makes the leader's scheduler stubborn
// (its stop takes the stop timeout and a SIGKILL), applies remove, and
// checks the takeover.
func barrierCase(t *testing.T, remove func(*world, *member)) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	leader.Units.SetStubborn(units[1], true)
	at := time.Now()
	remove(w, leader)
	err := leader.WaitExit(t, 15*time.Second, "fence after its keys were removed")
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	leaderOf(t, others[0])
	stopped, started := lastStop(leader), firstStartAfter(others[0], at)
	t.Logf("removed at 0; old fenced (%s), units down at +%s; new units at +%s",
		fe.Reason, stopped.Sub(at).Round(time.Millisecond), started.Sub(at).Round(time.Millisecond))
	if !stopped.Before(started) {
		t.Fatalf("barrier did not hold: new units started at +%s, before the old ones stopped at +%s",
			started.Sub(at).Round(time.Millisecond), stopped.Sub(at).Round(time.Millisecond))
	}
	assertNoOverlap(t, a, b)
}

// A standby whose record was deleted writes it again (the old code's
// LeaseValue guard failed forever, and its next promotion with it).
func TestStandbyRewritesItsVanishedRecord(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	_, others := leaderOf(t, a, b)
	standby := others[0]
	key := standby.Sup.Keys().Member(standby.Name)
	ctx := context.Background()
	if _, err := w.Admin.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby's record to be written again", 10*time.Second, func() bool {
		resp, err := w.Admin.Get(ctx, key)
		return err == nil && len(resp.Kvs) == 1
	})
}

// A holder whose record vanished while its units may run fences: the
// others' barrier relies on that record.
func TestHolderFencesWhenItsRecordVanishes(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	if _, err := w.Admin.Delete(context.Background(), leader.Sup.Keys().Member(leader.Name)); err != nil {
		t.Fatal(err)
	}
	err := leader.WaitExit(t, 10*time.Second, "fence after its record vanished")
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	t.Logf("fenced: %s", fe.Reason)
	leaderOf(t, others[0])
	assertNoOverlap(t, a, b)
}
