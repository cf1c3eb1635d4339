package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// etcdElectionAllowance is added to the barrier's blind wait: stock etcd's
// election timeout (1 s), the time a new etcd leader may take before it
// answers for the leases it inherited.
const etcdElectionAllowance = time.Second

// holderMark is the previous holder of the election key as this member last
// observed it. The barrier waits for exactly this leadership to be over: a
// missing record alone proves nothing (it may have been deleted by hand).
type holderMark struct {
	Node  string
	Lease clientv3.LeaseID
	Token int64
	Seen  time.Time // when a read that showed it holding was answered
	// DownBy, when set, is when its units are proven down (see leaseProof).
	DownBy time.Time
	// Unknown: this member never saw anyone hold the key; Seen is then when
	// it first looked (zero: not yet). A holder whose key and record were
	// removed before we looked may still be within its lease.
	Unknown bool
	// ReplayedTo, when set, says this holder was not seen by this process
	// but replayed from its predecessor's (predecessorHolder), complete up
	// to that store revision; the promotion replays on to its win
	// (replayToWin), or waits as for an unknown holder from unknownSince
	// (our first look).
	ReplayedTo   int64
	unknownSince time.Time
}

func (h holderMark) known() bool { return h.Token != 0 }

// barrierView is one look at the etcd state the barrier decides on.
type barrierView struct {
	Self     string
	Blockers []string   // other members whose records say their units may run
	Prev     holderMark // zero: no previous holder known
	// PrevLeaseAlive: the previous holder's election lease still exists.
	PrevLeaseAlive bool
	// PrevRecord: the previous holder's record as read (nil: none).
	PrevRecord *group.Record
	// GoneAt is when the barrier first found neither the previous holder's
	// lease nor its record (zero while either exists).
	GoneAt time.Time
	// DownBy, when set, is an instant by which the previous holder's units
	// are proven down whatever happens to its keys: a lease of its was seen
	// so close to expiry that the holder was already past its fence instant
	// (see leaseProof).
	DownBy time.Time
}

// barrierVerdict is the barrier's answer: pass, or wait (until Until when
// the wait is a timer).
type barrierVerdict struct {
	Pass  bool
	Until time.Time
	Why   string
}

// decideBarrier is the promotion barrier's whole policy, a pure function of
// one view and the time: blind is TTL*(1+rho) plus the etcd election
// allowance, the longest the previous holder can keep its units up after its
// last renewal.
func decideBarrier(now time.Time, v barrierView, blind time.Duration) barrierVerdict {
	if len(v.Blockers) > 0 {
		return barrierVerdict{Why: fmt.Sprintf("members %v report their units may run", v.Blockers)}
	}
	p := v.Prev
	if p.Unknown {
		return decideUnknown(now, p.Seen, blind)
	}
	if !p.known() || p.Node == v.Self {
		// Our own earlier incarnation: start-up confirmed its units stopped.
		return barrierVerdict{Pass: true, Why: "no previous holder to wait for"}
	}
	if !v.DownBy.IsZero() && !now.Before(v.DownBy) {
		return barrierVerdict{Pass: true, Why: fmt.Sprintf("%s was past its fence instant; its units are down", p.Node)}
	}
	switch {
	case v.PrevLeaseAlive:
		return barrierVerdict{Why: fmt.Sprintf("election lease %x of %s (token %d) still exists", p.Lease, p.Node, p.Token)}
	case v.PrevRecord != nil && v.PrevRecord.UnitsRunning:
		return barrierVerdict{Why: fmt.Sprintf("record of %s says its units may run", p.Node)}
	case v.PrevRecord != nil:
		return barrierVerdict{Pass: true, Why: fmt.Sprintf("%s's lease is gone and its record says its units are stopped", p.Node)}
	case v.GoneAt.IsZero():
		return barrierVerdict{Why: fmt.Sprintf("state of %s not read yet", p.Node)}
	}
	until := v.GoneAt.Add(blind)
	if !v.DownBy.IsZero() && v.DownBy.Before(until) {
		until = v.DownBy
	}
	if now.Before(until) {
		return barrierVerdict{Until: until, Why: fmt.Sprintf("neither the lease nor the record of %s (token %d) exists; waiting out one lease until %s",
			p.Node, p.Token, until.Format("15:04:05.000"))}
	}
	return barrierVerdict{Pass: true, Why: fmt.Sprintf("%s's lease and record are gone and one full lease has passed", p.Node)}
}

// decideUnknown covers a member that never saw a holder: anything that held
// the key before it first looked (at since) is down one blind wait later.
func decideUnknown(now, since time.Time, blind time.Duration) barrierVerdict {
	until := since.Add(blind)
	if since.IsZero() || now.Before(until) {
		return barrierVerdict{Until: until, Why: fmt.Sprintf("no holder of the election key seen since this member started; waiting out one lease until %s",
			until.Format("15:04:05.000"))}
	}
	return barrierVerdict{Pass: true, Why: "one full lease has passed since this member first looked"}
}

// leaseProof turns one observation of a lease of the previous holder (its
// remaining TTL as etcd reports it, truncated to whole seconds, answered at
// at) into an instant by which its units are down, if the observation
// proves one. The holder fences StopMax + margin before its lease can lapse;
// a lease with less than that left when read means the holder was already
// past its fence instant at the read (any renewal after it comes from a
// fencing process, which never starts a unit again, or was sent before the
// read and is answered after the fence instant, which the holder does not
// count: onRenewal), and its units are down by the lease's expiry, which is
// before at + remaining + 1 s.
func (s *Supervisor) leaseProof(remaining time.Duration, at time.Time, holder string) (time.Time, bool) {
	if remaining < 0 {
		return time.Time{}, false
	}
	left := remaining + time.Second // truncation
	if left > s.proofMargin(holder) {
		return time.Time{}, false
	}
	return at.Add(left + s.clockPad()), true
}

// proofMargin is the S_max + lease.slack to reason with about holder's
// lease (groupTiming.proofMargin: no more than holder's, as far as we
// know, and no more than ours); ours without a groupTiming (tests).
func (s *Supervisor) proofMargin(holder string) time.Duration {
	if s.timing == nil {
		return s.window.StopMax + s.window.Slack
	}
	return s.timing.proofMargin(holder)
}

// longestTTL is the longest lease.ttl of any member known, ours when no
// other is.
func (s *Supervisor) longestTTL() time.Duration { return max(s.window.TTL, s.timing.longestTTL()) }

// clockPad is how much a proof's instant is moved later because our clock
// may run slow: rho of the longest lease.
func (s *Supervisor) clockPad() time.Duration {
	return time.Duration(float64(s.longestTTL()) * s.window.ClockRate)
}

// blindWait is how long the barrier waits when the previous holder left no
// trace: one full lease (the longest of any member known) on our possibly
// slow clock plus etcd's allowance.
func (s *Supervisor) blindWait() time.Duration {
	return time.Duration(float64(s.longestTTL())*(1+s.window.ClockRate)) + etcdElectionAllowance
}

// barrier blocks the promotion until decideBarrier passes.
func (s *Supervisor) barrier(ctx context.Context, prev holderMark) error {
	var last string
	track := barrierTrack{downBy: prev.DownBy}
	if prev.Unknown && prev.Seen.IsZero() {
		prev.Seen = s.now()
	}
	s.log.Debug("promotion barrier", "previous_holder", prev.Node, "lease", fmt.Sprintf("%x", prev.Lease), "token", prev.Token, "unknown", prev.Unknown)
	for {
		v, err := s.barrierLook(ctx, prev)
		now := s.now()
		if err == nil {
			d := decideBarrier(now, track.fold(now, v), s.blindWait())
			if d.Pass {
				if last != "" {
					s.log.Info("promotion barrier passed", "why", d.Why)
				}
				return nil
			}
			if d.Why != last {
				s.log.Warn("promotion barrier: waiting", "why", d.Why)
				last = d.Why
			}
		}
		if err := sleep(ctx, s.cfg.Units.PollInterval/4); err != nil {
			return err
		}
	}
}

// barrierTrack is what the barrier carries from one look to the next.
type barrierTrack struct {
	goneAt time.Time // when the previous holder's lease and record were first both found gone
	downBy time.Time // the earliest proof yet that its units are down
}

// fold adds the look v taken at now and returns v with GoneAt and DownBy
// as decideBarrier wants them: a lease or record seen again restarts the
// blind wait, and a proof once found is kept.
func (b *barrierTrack) fold(now time.Time, v barrierView) barrierView {
	if v.PrevLeaseAlive || v.PrevRecord != nil {
		b.goneAt = time.Time{}
	} else if b.goneAt.IsZero() {
		b.goneAt = now
	}
	if !v.DownBy.IsZero() && (b.downBy.IsZero() || v.DownBy.Before(b.downBy)) {
		b.downBy = v.DownBy
	}
	v.GoneAt, v.DownBy = b.goneAt, b.downBy
	return v
}

// barrierLook reads every record and, when a previous holder is known, its
// election lease and its record's lease.
func (s *Supervisor) barrierLook(ctx context.Context, prev holderMark) (barrierView, error) {
	v := barrierView{Self: s.cfg.Node, Prev: prev}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.pool.Hedged().Get(rctx, s.keys.Members(), clientv3.WithPrefix())
	if err != nil {
		return v, fmt.Errorf("read member records: %w", err)
	}
	recs, leases := group.DecodeMembers(s.keys, resp.Kvs)
	s.timing.observe(recs, s.cfg.Node, s.now())
	v.Blockers = group.Blockers(recs, s.cfg.Node)
	if !prev.known() || prev.Node == s.cfg.Node {
		return v, nil
	}
	if r, ok := recs[prev.Node]; ok {
		v.PrevRecord = &r
	}
	for _, l := range []clientv3.LeaseID{prev.Lease, leases[prev.Node]} {
		alive, left, _, at, err := s.leaseLeft(rctx, l)
		if err != nil {
			return v, err
		}
		if alive && l == prev.Lease {
			v.PrevLeaseAlive = true
		}
		if by, ok := s.leaseProof(left, at, prev.Node); alive && ok && (v.DownBy.IsZero() || by.Before(v.DownBy)) {
			v.DownBy = by
		}
	}
	return v, nil
}

// ourCluster reports whether a response header comes from the etcd cluster
// the pool verified (any, before it verified one).
func (s *Supervisor) ourCluster(h *etcdserverpb.ResponseHeader) bool {
	want := s.pool.ClusterID()
	return h != nil && (want == 0 || h.ClusterId == want)
}

// leaseLeft asks etcd for a lease's remaining and granted TTL. Lease 0 (a
// key put without a lease) does not exist.
func (s *Supervisor) leaseLeft(ctx context.Context, l clientv3.LeaseID) (alive bool, left, granted time.Duration, at time.Time, err error) {
	if l == 0 {
		return false, 0, 0, time.Time{}, nil
	}
	resp, err := etcdconn.Hedged(ctx, s.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseTimeToLiveResponse, error) {
		r, err := c.TimeToLive(ctx, l)
		if err == nil && !s.ourCluster(r.ResponseHeader) {
			// "Gone" from another etcd cluster would pass the barrier.
			return nil, fmt.Errorf("lease %x read from another etcd cluster (%x)", l, r.ResponseHeader.GetClusterId())
		}
		return r, err
	}, nil)
	at = s.now()
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return false, 0, 0, at, nil
	case err != nil:
		return false, 0, 0, at, fmt.Errorf("read lease %x: %w", l, err)
	case resp.TTL < 0:
		return false, 0, 0, at, nil
	}
	granted = time.Duration(resp.GrantedTTL) * time.Second
	s.timing.sawLease(granted, at)
	return true, time.Duration(resp.TTL) * time.Second, granted, at, nil
}
