package supervisor

import (
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// readerWith is a member with lease ttl, S_max stopMax and slack 0.5 s
// that has read the records given.
func readerWith(ttl, stopMax time.Duration, recs map[string]group.Record) *Supervisor {
	s := &Supervisor{}
	s.window.TTL, s.window.StopMax, s.window.Slack, s.window.ClockRate = ttl, stopMax, 500*time.Millisecond, 0.01
	s.cfg.Node = "m2"
	s.cfg.Units.PollInterval = 500 * time.Millisecond
	s.timing = newGroupTiming(s.window.TTL, s.window.StopMax+s.window.Slack)
	s.timing.observe(recs, s.cfg.Node, time.Now())
	return s
}

// A member on "fast" (proof margin 2 s) reading the lease of a holder on
// "fast-kill" (0.8 s) with 1 s left: the holder is not yet past its fence
// instant (it fences with 0.8 s left) and may renew, so the read proves
// nothing. Before group.Timing the reader used its own margin and took it
// for proof: during a change of profile node by node, a proof of units down
// that were not. The margin is the holder's: another member on fast-kill
// does not slow the proof about a holder on ours; a holder whose timing is
// not known (record of an older version, or not read) gets the smallest a
// shipped profile has.
func TestLeaseProofUsesTheHoldersMargin(t *testing.T) {
	at := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	fastKill := group.Record{Node: "m1", Timing: &group.Timing{TTLMS: 4000, ProofMarginMS: 800}}
	fast := group.Record{Node: "m1", Timing: &group.Timing{TTLMS: 6000, ProofMarginMS: 2000}}
	m3 := fastKill
	m3.Node = "m3"
	for _, c := range []struct {
		name string
		recs map[string]group.Record
		want bool
	}{
		{"the holder on our timing", map[string]group.Record{"m1": fast}, true},
		{"the holder on fast-kill", map[string]group.Record{"m1": fastKill}, false},
		{"the holder of a version that publishes no timing", map[string]group.Record{"m1": {Node: "m1"}}, false},
		{"the holder's record not read", nil, false},
		{"the holder on our timing, another member on fast-kill", map[string]group.Record{"m1": fast, "m3": m3}, true},
		{"the holder's record not read, another member with a margin of 0.5 s", map[string]group.Record{"m3": {Node: "m3", Timing: &group.Timing{TTLMS: 4000, ProofMarginMS: 500}}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := readerWith(6*time.Second, 1500*time.Millisecond, c.recs)
			_, ok := s.leaseProof(0, at, "m1") // 0 s left: at most 1 s
			if ok != c.want {
				t.Errorf("a read of m1's lease with 0 s left taken as proof: %v, want %v (proof margin %s)", ok, c.want, s.proofMargin("m1"))
			}
		})
	}
	s := readerWith(6*time.Second, 1500*time.Millisecond, map[string]group.Record{"m3": {Node: "m3", Timing: &group.Timing{TTLMS: 4000, ProofMarginMS: 500}}})
	if got := s.proofMargin("m1"); got != 500*time.Millisecond {
		t.Errorf("holder of unknown timing, a member with 0.5 s in the group: margin %s, want 500ms", got)
	}
	neg := readerWith(6*time.Second, 1500*time.Millisecond, map[string]group.Record{"m1": {Node: "m1", Timing: &group.Timing{TTLMS: 4000, ProofMarginMS: -300}}})
	if got := neg.proofMargin("m1"); got != 0 {
		t.Errorf("a record publishing a negative margin: %s, want 0", got)
	}
}

// A member on the old fast-kill (TTL 5 s) reading a holder on the new one
// (TTL 4 s): two reads with 0 s left 3.5 s apart do not rule out a renewal
// of a 4 s lease in between (renewed just after the first read, it shows
// 0 s left again 3 s later), so they prove nothing. With its own TTL the
// reader allowed 3.92 s between them.
func TestTickProofUsesTheLeasesGrantedTTL(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 13, 0, 0, 0, time.UTC)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, c := range []struct {
		name    string
		granted time.Duration
		want    bool
	}{
		{"a lease as long as ours", 5 * time.Second, true},
		{"granted TTL unknown: ours", 0, true},
		{"a 4 s lease", 4 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := readerWith(5*time.Second, 300*time.Millisecond, map[string]group.Record{"m1": {Node: "m1", Timing: &group.Timing{TTLMS: 5000, ProofMarginMS: 800}}})
			var w leaseWatch
			lease := clientv3.LeaseID(0x10)
			s.tickProof(&w, "m1", lease, 0, c.granted, t0, t0.Add(ms(5)))
			by := s.tickProof(&w, "m1", lease, 0, c.granted, t0.Add(ms(3500)), t0.Add(ms(3505)))
			if got := !by.IsZero(); got != c.want {
				t.Errorf("0 s left twice, 3.5 s apart, granted TTL %s: proof %v, want %v", c.granted, got, c.want)
			}
		})
	}
}

// A member on a 4 s lease whose group has a member on a 10 s lease waits
// one of the longer leases when the holder left no trace; and a lease of
// another member read with a longer granted TTL counts too. A member not
// seen for two of the longest leases is forgotten.
func TestBlindWaitIsTheLongestLeaseInTheGroup(t *testing.T) {
	s := readerWith(4*time.Second, 300*time.Millisecond, map[string]group.Record{"m1": {Node: "m1", Timing: &group.Timing{TTLMS: 10000, ProofMarginMS: 3500}}})
	if got, want := s.blindWait(), time.Duration(float64(10*time.Second)*1.01)+etcdElectionAllowance; got != want {
		t.Errorf("blind wait %s, want %s (one 10 s lease)", got, want)
	}
	alone := readerWith(4*time.Second, 300*time.Millisecond, nil)
	alone.timing.sawLease(6*time.Second, time.Now())
	if got, want := alone.blindWait(), time.Duration(float64(6*time.Second)*1.01)+etcdElectionAllowance; got != want {
		t.Errorf("after reading a 6 s lease: blind wait %s, want %s", got, want)
	}
	later := time.Now().Add(21 * time.Second)
	s.timing.observe(nil, "m2", later)
	if got, want := s.blindWait(), time.Duration(float64(4*time.Second)*1.01)+etcdElectionAllowance; got != want {
		t.Errorf("m1 unseen for 21 s: blind wait %s, want our own %s", got, want)
	}
}

// The peer check feeds the proofs and reports a member on other timings
// once per change.
func TestPeerCheckNotesOtherTimings(t *testing.T) {
	s := readerWith(6*time.Second, 1500*time.Millisecond, nil)
	s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	pc := &peerCheck{}
	odd := map[string]group.Record{"m1": {Node: "m1", Timing: &group.Timing{TTLMS: 4000, ProofMarginMS: 800}}}
	now := time.Now()
	s.checkTimings(pc, odd, now)
	if len(pc.timing) != 1 || s.proofMargin("m1") != 800*time.Millisecond {
		t.Fatalf("after a fast-kill record: reported %v, proof margin %s; want m1 reported and 800ms", pc.timing, s.proofMargin("m1"))
	}
	same := map[string]group.Record{"m1": {Node: "m1", Timing: &group.Timing{TTLMS: 6000, ProofMarginMS: 2000}}}
	s.checkTimings(pc, same, now.Add(time.Second))
	if len(pc.timing) != 0 || s.proofMargin("m1") != 2*time.Second {
		t.Fatalf("after m1 changed to ours: reported %v, proof margin %s; want none and 2s", pc.timing, s.proofMargin("m1"))
	}
	s.checkTimings(pc, map[string]group.Record{"m1": {Node: "m1"}}, now.Add(2*time.Second))
	if len(pc.timing) != 1 {
		t.Fatalf("a record of an older version (no timing) is not reported: %v", pc.timing)
	}
}

// legacyProofMargin, assumed for a holder whose timing is unknown, must be
// the smallest proof margin a shipped profile publishes: a larger one would
// take a lease with that much left for proof that such a holder is past its
// fence instant while it may still run its units.
func TestLegacyProofMarginIsTheSmallestShippedOne(t *testing.T) {
	least := time.Duration(-1)
	for _, name := range config.ProfileNames() {
		c := config.Default()
		if err := c.UseProfile(name); err != nil {
			t.Fatal(err)
		}
		w := c.Window()
		if m := w.StopMax + w.Slack; least < 0 || m < least {
			least = m
		}
	}
	if legacyProofMargin != least {
		t.Errorf("legacyProofMargin %s, want the smallest shipped S_max + lease.slack, %s", legacyProofMargin, least)
	}
}
