package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// These tests run real supervisors against a real three-member etcd
// cluster with in-memory units (see internal/supervisortest); real systemd
// is tested in the fencing package and the lab.

var (
	units           = supervisortest.Units
	leaderOf        = supervisortest.LeaderOf
	waitFor         = supervisortest.WaitFor
	assertNoOverlap = supervisortest.AssertNoOverlap
	lastStop        = supervisortest.LastStop
	firstStartAfter = supervisortest.FirstStartAfter
)

type member = supervisortest.Member

type world = supervisortest.World

func newWorld(t *testing.T) *supervisortest.World { return supervisortest.NewWorld(t, 3) }

func TestExactlyOneActive(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// Stay a while: the standby must stay standby, the leader active.
	time.Sleep(3 * time.Second)
	if leader.State() != group.Active || others[0].State() != group.Standby {
		t.Fatalf("after 3s: %s is %s, %s is %s", leader.Name, leader.State(), others[0].Name, others[0].State())
	}
	st := others[0].Sup.Status()
	if st.Leader != leader.Name || st.UnitsAllowed {
		t.Fatalf("standby status %+v: want leader %s and units not allowed", st, leader.Name)
	}
	ls := leader.Sup.Status()
	if !ls.UnitsAllowed || ls.Token == 0 || ls.LeaseLeft <= ls.StopMax {
		t.Fatalf("leader status %+v: want units allowed, a token and more lease than the stop budget", ls)
	}
	// The token is the election key's CreateRevision.
	resp, err := w.Admin.Get(context.Background(), leader.Sup.Keys().Leader())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != ls.Token || string(resp.Kvs[0].Value) != leader.Name {
		t.Fatalf("election key %v (err %v) does not match token %d of %s", resp, err, ls.Token, leader.Name)
	}
	assertNoOverlap(t, a, b)
}

func TestSimultaneousStartOneLeader(t *testing.T) {
	w := newWorld(t)
	var ms []*member
	for i := 1; i <= 3; i++ {
		ms = append(ms, w.Start(fmt.Sprintf("m%d", i), nil))
	}
	leaderOf(t, ms...)
	time.Sleep(time.Second)
	leaderOf(t, ms...)
	assertNoOverlap(t, ms...)
}

func TestGracefulStopHandsOver(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	next := others[0]
	stopAt := time.Now()
	leader.Cancel()
	if err := leader.WaitExit(t, 10*time.Second, "stop"); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	if leader.Units.Running(units[0]) || leader.Units.Running(units[1]) {
		t.Fatal("units still running on the stopped leader")
	}
	leaderOf(t, next)
	started := firstStartAfter(next, stopAt)
	handoff := started.Sub(stopAt)
	t.Logf("handoff: SIGTERM-equivalent to new units started: %s (TTL %s)", handoff, 4*time.Second)
	// A release hands over at once; an expiry would take at least the TTL.
	if handoff >= 4*time.Second {
		t.Fatalf("handoff took %s: the lease expired instead of being released", handoff)
	}
	assertNoOverlap(t, a, b)
}

func TestPartitionedLeaderFencesBeforeTakeover(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	cutAt := time.Now()
	leader.Cut(true)
	err := leader.WaitExit(t, 20*time.Second, "fence when partitioned")
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) || fe.Incomplete != nil {
		t.Fatalf("Run returned %v, want a complete FenceError", err)
	}
	leaderOf(t, others[0])
	stopped := lastStop(leader)
	started := firstStartAfter(others[0], cutAt)
	t.Logf("cut at 0; old units stopped at +%s; new units started at +%s; margin %s",
		stopped.Sub(cutAt).Round(time.Millisecond), started.Sub(cutAt).Round(time.Millisecond), started.Sub(stopped).Round(time.Millisecond))
	if !stopped.Before(started) {
		t.Fatalf("new units started at %s, before the old ones stopped at %s", started, stopped)
	}
	assertNoOverlap(t, a, b)
}

func TestRevokedLeaseFencesAndBarrierHolds(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// The old leader's scheduler ignores SIGTERM: its stop takes the whole
	// stop timeout and a SIGKILL. The new leader wins at once (the key is
	// gone) and must wait at the barrier for that.
	leader.Units.SetStubborn(units[1], true)
	resp, err := w.Admin.Get(context.Background(), leader.Sup.Keys().Leader())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read election key: %v", err)
	}
	revokedAt := time.Now()
	if _, err := w.Admin.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	err = leader.WaitExit(t, 10*time.Second, "fence after its lease was revoked")
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	leaderOf(t, others[0])
	stopped := lastStop(leader)
	started := firstStartAfter(others[0], revokedAt)
	t.Logf("revoked at 0; old fenced (%s) with units down at +%s; new units at +%s",
		fe.Reason, stopped.Sub(revokedAt).Round(time.Millisecond), started.Sub(revokedAt).Round(time.Millisecond))
	if stopped.Sub(revokedAt) < time.Second {
		t.Fatalf("stubborn unit stopped after %s: the SIGKILL escalation did not wait for the stop timeout", stopped.Sub(revokedAt))
	}
	if !stopped.Before(started) {
		t.Fatal("barrier did not hold: new units started before the old ones stopped")
	}
	assertNoOverlap(t, a, b)
}

func TestQuorumLossFencesAndNobodyRuns(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	w.Cluster.Member(0).Stop()
	w.Cluster.Member(1).Stop()
	lostAt := time.Now()
	var fe *supervisor.FenceError
	if err := leader.WaitExit(t, 20*time.Second, "fence after quorum loss"); !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	// While quorum is lost nobody may run the units.
	time.Sleep(6 * time.Second)
	for _, m := range []*member{a, b} {
		if m.Units.Running(units[0]) || m.Units.Running(units[1]) {
			t.Fatalf("%s runs units without quorum", m.Name)
		}
	}
	if err := w.Cluster.Member(0).Restart(); err != nil {
		t.Fatal(err)
	}
	if err := w.Cluster.Member(1).Restart(); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, others[0])
	t.Logf("quorum lost at 0; old units stopped at +%s; new leader after restore at +%s",
		lastStop(leader).Sub(lostAt).Round(time.Millisecond), firstStartAfter(others[0], lostAt).Sub(lostAt).Round(time.Millisecond))
	assertNoOverlap(t, a, b)
}

func TestStandbyStopsUnitStartedBehindItsBack(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	standby.Units.StartBehindBack(units[1])
	waitFor(t, "standby to stop the unit", 10*time.Second, func() bool { return !standby.Units.Running(units[1]) })
	if leader.State() != group.Active {
		t.Fatalf("leader is %s", leader.State())
	}
}

func TestCrashLoopingUnitDemotesLeader(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// Crash the scheduler each time it comes back, as a crash-looping
	// service would.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if leader.Units.Running(units[1]) {
				leader.Units.Crash(units[1])
			}
		}
	}()
	waitFor(t, "the other member to take over", 30*time.Second, func() bool {
		return others[0].State() == group.Active
	})
	st := leader.Sup.Status()
	if st.State != group.Standby || !st.CooldownUntil.After(time.Now()) {
		t.Fatalf("old leader %s, cooldown until %v: want standby in cooldown", st.State, st.CooldownUntil)
	}
	assertNoOverlap(t, a, b)
}

func TestLeaderSurvivesOneSilentEtcdMember(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// One of three members goes silent for the leader only: its bytes are
	// held, no connection is reset, as with a blackhole route. Quorum is
	// intact and reachable, so the leader must keep its lease.
	before := leader.RenewFailures.Load()
	leader.Proxies[0].Blackhole(true)
	defer leader.Proxies[0].Blackhole(false)
	supervisortest.StaysLeader(t, leader, others[0], 4*4*time.Second, "with one silent etcd member", nil) // four TTLs
	// Renewals go to every member at once, so the silent one costs none
	// (with a single round-robin client about one in three timed out).
	// One is tolerated for a loaded machine.
	if n := leader.RenewFailures.Load() - before; n > 1 {
		t.Fatalf("%d renewals failed with one silent member out of three", n)
	}
	assertNoOverlap(t, a, b)
}

// An operator's start on a standby sits in ExecStartPre= while the guard
// decides: the standby leaves it to the guard (which refuses, naming the
// leader) for a grace period, and stops it only if it lingers there.
func TestStandbyLeavesStartPreToTheGuard(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	_, others := leaderOf(t, a, b)
	standby := others[0]
	standby.Units.StartPreBehindBack(units[1])
	time.Sleep(2 * time.Second) // eight polls
	st, _ := standby.Units.States(context.Background(), units[1:])
	if st[0].ActiveState != "activating" {
		t.Fatalf("the standby interfered with a start still in ExecStartPre= after 2s: %+v", st[0])
	}
	waitFor(t, "the standby to stop a unit lingering in start-pre", 10*time.Second, func() bool {
		st, _ := standby.Units.States(context.Background(), units[1:])
		return st[0].ActiveState == "inactive"
	})
}

// systemd stops reading its notify socket during daemon-reexec; a datagram
// write then blocks once the socket's queue is full. The loop must keep
// renewing and must not fence (found by the lab's soak: scenario 15).
func TestBlockedNotifyDoesNotStallTheLoop(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	blockUntil := time.Time{}
	w.Options = func(name string, o *supervisor.Options) {
		o.Notify = func(msg string) {
			mu.Lock()
			until := blockUntil
			mu.Unlock()
			time.Sleep(time.Until(until))
		}
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	mu.Lock()
	blockUntil = time.Now().Add(3 * time.Second) // longer than the 1.96 s fence window
	mu.Unlock()
	supervisortest.StaysLeader(t, leader, others[0], 5*time.Second, "while sd_notify blocked", func() {
		// The loop itself must keep turning: it is what fences on time.
		if age := time.Since(leader.Sup.Status().LastTick); age > time.Second {
			t.Fatalf("the loop has not ticked for %s while sd_notify blocked", age)
		}
	})
	assertNoOverlap(t, a, b)
}
