package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// Lease names in the fence clock.
const (
	electionLease = "election"
	memberLease   = "member"
)

// onRenewal folds one renewal answer into the fence clock.
func (s *Supervisor) onRenewal(r renewal) {
	switch {
	case r.name == electionLease && r.lease != s.term.elecLease, r.name == memberLease && r.lease != s.loop.memberLease:
		return // answer for a lease we no longer track
	case r.err == nil && s.loop.state.Holding() && s.term.deadline.Expired(r.sent.Add(r.took)):
		// Received past the fence instant: the fence stands, whenever the
		// request was sent. The barrier's lease-reading proofs rest on it
		// (leaseProof, tickProof): a standby that read our lease with at
		// most S_max + slack left takes us for past our fence instant and
		// our units for down by that lease's expiry, and a renewal sent
		// before that read but processed after it reaches us only now.
		s.log.Debug("renewal answer received after the fence instant; not counted", "lease", r.name,
			"late", -s.term.deadline.Left(r.sent.Add(r.took)).Round(time.Millisecond))
		return
	case r.err == nil:
		s.term.deadline.Renewed(r.name, r.sent, r.ttl)
		s.resetFenceTimer()
		s.logRenewRecovered(r.name)
		return
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound) && r.name == electionLease && s.loop.state == group.Demoting:
		// The demotion releases the lease itself; an answer racing that
		// release is not a loss. Had someone else revoked it, the next
		// leader still waits at the barrier for our record to say the
		// units are down, and the fence clock keeps running regardless.
		return
	case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
		if s.loop.state.Holding() {
			s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("%s lease %x no longer exists in etcd (revoked or expired)", r.name, r.lease), "lease_lost"
			return
		}
		if r.name == memberLease {
			s.log.Warn("member lease lost while standby; re-registering", "lease", fmt.Sprintf("%x", r.lease))
			s.dropMemberLease()
		}
	default:
		s.logRenewFailure(r)
	}
}

// dropMemberLease forgets a member lease etcd no longer has; the standby
// loop then registers again (Standby -> Starting) before anything else.
func (s *Supervisor) dropMemberLease() {
	s.stopRenewer(memberLease, "member lease lost")
	s.term.deadline.Forget(memberLease)
	s.loop.memberLease = 0
}

type renewal struct {
	name  string
	lease clientv3.LeaseID
	sent  time.Time
	ttl   time.Duration
	took  time.Duration
	err   error
}

// startRenewer keeps a lease alive with KeepAliveOnce on our own schedule,
// recording when each request was sent. The client library's KeepAlive is
// not used: it dates its deadline from when an answer is received.
func (s *Supervisor) startRenewer(bg context.Context, name string, lease clientv3.LeaseID) {
	s.stopRenewer(name, "new lease")
	if name == memberLease {
		s.rec.lease.Store(int64(lease))
	}
	ctx, cancel := context.WithCancel(bg)
	s.loop.stopRenew[name] = cancel
	every := s.cfg.Lease.RenewInterval
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		// The first renewal goes out at once: the proof in hand dates from
		// the grant, and a slow campaign may have used most of the fence
		// window before the win was known.
		for first := true; ; first = false {
			if !first {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
			rctx, rcancel := context.WithTimeout(ctx, s.cfg.Etcd.RequestTimeout)
			sent := deadlineNow()
			ttl, endpoint, err := s.leases.keepAliveOnce(rctx, lease)
			rcancel()
			r := renewal{name: name, lease: lease, sent: sent, took: deadlineNow().Sub(sent), ttl: ttl, err: err}
			if s.opts.RenewObserver != nil {
				s.opts.RenewObserver(name, endpoint, r.took, err)
			}
			select {
			case s.in.renewals <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// stopRenewer stops a lease's renewals; why ends its run of failures, if
// one is open (a new lease starts a new run).
func (s *Supervisor) stopRenewer(name, why string) {
	s.endRenewStreak(name, why)
	if c := s.loop.stopRenew[name]; c != nil {
		c()
		delete(s.loop.stopRenew, name)
	}
	if name == memberLease {
		s.rec.lease.Store(0)
	}
}
