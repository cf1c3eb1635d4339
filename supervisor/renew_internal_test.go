package supervisor

import (
	"io"
	"log/slog"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// A holder past its fence instant stays fenced: a renewal answer that
// arrives after that instant, for a request sent before it, does not move
// the instant. The barrier's lease-reading proofs (leaseProof, tickProof)
// rest on this: a standby that read the holder's lease with at most S_max +
// slack left concludes the holder was past its fence instant and its units
// are down by that lease's expiry; a renewal sent before that read but
// processed by etcd after it reaches the holder only after its fence instant.
// Counted (the old code did, whenever the loop read the answer before acting
// on the instant, and drainRenewals read every queued answer first), it gave
// the holder a new window while the standby held a proof it was down: with
// the key and the record then removed by hand (etcdctl del --prefix, or both
// leases revoked) the standby passed the barrier at once and started its
// units while the holder's ran until it noticed the deletion and stopped
// them, up to S_max later.
func TestLateRenewalNeverRevivesAHolderPastItsFenceInstant(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	w := fencing.Window{TTL: 5 * time.Second, ClockRate: 0.01, StopMax: ms(300), Slack: ms(500), Watchdog: ms(500)}
	for _, c := range []struct {
		name     string
		received time.Duration // after the fence instant (negative: before)
		fenced   bool
	}{
		{"answers received before the fence instant count", -ms(50), false},
		{"answers received after the fence instant do not", ms(50), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &Supervisor{window: w, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			s.term.deadline = fencing.NewDeadlineClock(w, fencing.IdentityClock{})
			s.loop.state = group.Active
			s.term.elecLease, s.loop.memberLease = clientv3.LeaseID(0x10), clientv3.LeaseID(0x20)
			s.loop.fenceTimer = time.NewTimer(time.Hour)
			defer s.loop.fenceTimer.Stop()
			now := time.Now()
			// Both leases last renewed 4.3 s ago: the fence instant
			// (4.15 s after) was 150 ms ago.
			ts := now.Add(-ms(4300))
			s.term.deadline.Renewed(electionLease, ts, w.TTL)
			s.term.deadline.Renewed(memberLease, ts, w.TTL)
			fenceAt, _ := s.term.deadline.At()
			if !s.term.deadline.Expired(now) {
				t.Fatalf("set-up: fence instant %s not passed", fenceAt.Sub(now))
			}
			// Renewals sent 450 ms before the fence instant, their
			// answers received c.received after it.
			sent := fenceAt.Add(-ms(450))
			took := fenceAt.Add(c.received).Sub(sent)
			for name, lease := range map[string]clientv3.LeaseID{electionLease: 0x10, memberLease: 0x20} {
				s.onRenewal(renewal{name: name, lease: lease, sent: sent, took: took, ttl: w.TTL})
			}
			if got := s.term.deadline.Expired(time.Now()); got != c.fenced {
				at, _ := s.term.deadline.At()
				t.Fatalf("after the answers: fenced %v, want %v (fence instant now %s from now)", got, c.fenced, at.Sub(time.Now()).Round(time.Millisecond))
			}
		})
	}
}
