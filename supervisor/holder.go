package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// groupSeen is the group as the loop last read it (loop-owned): operator
// control and its unreadable records, the election key's problem, every
// member record, and when the key was first read.
type groupSeen struct {
	ctl         group.Control           // operator requests, as last read
	ctlProblems string                  // the unreadable control records last reported
	keyProblem  string                  // the election key's problem, if any
	members     map[string]group.Record // every record as last read
	firstLook   time.Time               // when the election key was first read
	holderKept  time.Time               // when the holder was last saved for a successor (keepHolder)
	// newestToken is the newest election token (the key's create
	// revision, which only grows) seen held by anyone: a handoff request
	// for an older leadership is fulfilled, whatever etcd still holds.
	newestToken int64
}

// notePrevHolder remembers the last other holder of the election key seen,
// for the next promotion's barrier (see decideBarrier).
func (s *Supervisor) notePrevHolder(li group.LeaderInfo) {
	if s.seen.firstLook.IsZero() {
		s.seen.firstLook = s.now()
	}
	if li.Present() && li.Token > s.seen.newestToken {
		s.seen.newestToken = li.Token
	}
	// Our own key (a read that raced our win, or an earlier incarnation
	// of ours, whose units start-up stopped) is nobody to wait for.
	if !li.Present() || li.Node == s.cfg.Node {
		return
	}
	downBy := time.Time{}
	same := s.term.prevHolder.Token == li.Token
	if same {
		downBy = s.term.prevHolder.DownBy
	}
	if !same || s.term.prevHolder.Lease != li.Lease || s.term.prevHolder.ReplayedTo != 0 || s.now().Sub(s.seen.holderKept) >= holderKeepEvery {
		s.keepHolder(li.Node, li.Lease, li.Token, li.Revision)
	}
	s.term.prevHolder = holderMark{Node: li.Node, Lease: li.Lease, Token: li.Token, Seen: s.now(), DownBy: downBy}
}

// noteProof keeps the earliest proof that the holder's units are down.
func (s *Supervisor) noteProof(li group.LeaderInfo, by time.Time) {
	if by.IsZero() || s.term.prevHolder.Token != li.Token || li.Token == 0 {
		return
	}
	if s.term.prevHolder.DownBy.IsZero() || by.Before(s.term.prevHolder.DownBy) {
		s.term.prevHolder.DownBy = by
	}
}

// checkOwnRecord reacts to our own member record missing from a read taken
// after our last write of it: a holder whose units may run fences (the
// others' barrier relies on that record), anyone else writes it again.
func (s *Supervisor) checkOwnRecord(o leaderObs) {
	if o.members == nil || s.loop.memberLease == 0 {
		return
	}
	if _, ok := o.members[s.cfg.Node]; ok {
		return
	}
	rev := s.rec.rev.Load()
	if rev == 0 || o.info.Revision < rev {
		return // not written yet, or read before our last write
	}
	if hold := s.rec.hold.Load(); hold != 0 && o.info.Revision >= hold && s.loop.state.Holding() {
		s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("our member record %s vanished while our units may run", s.keys.Member(s.cfg.Node)), "record_lost"
		return
	}
	s.log.Warn("our member record vanished; writing it again", "key", s.keys.Member(s.cfg.Node))
	offer(s.rec.wake, struct{}{})
}

// barrierHolder is what the next promotion's barrier waits for.
func (s *Supervisor) barrierHolder() holderMark {
	if s.term.prevHolder.known() {
		h := s.term.prevHolder
		h.unknownSince = s.seen.firstLook
		return h
	}
	return holderMark{Unknown: true, Seen: s.seen.firstLook}
}

// noteControl adopts the operator's requests as read, and reports
// unreadable ones as an ERROR once per change (they are ignored).
func (s *Supervisor) noteControl(c group.Control) {
	s.seen.ctl = c
	if p := strings.Join(c.Unreadable, "; "); p != s.seen.ctlProblems {
		s.seen.ctlProblems = p
		if p != "" {
			s.log.Error("unreadable control records are ignored", "records", c.Unreadable)
		}
	}
}

// noteLeaselessKey reports an election key that is on no lease: no member
// ever writes one (someone put it by hand), and it would never expire, so
// every member would wait for it forever. Standbys delete it (see step).
func (s *Supervisor) noteLeaselessKey(li group.LeaderInfo) {
	p := ""
	if li.Present() && li.Lease == 0 {
		p = fmt.Sprintf("election key %s (value %q, token %d) is on no lease, so it never expires; deleting it (by hand: etcdctl del %s)",
			s.keys.Leader(), li.Node, li.Token, s.keys.Leader())
	}
	if p != s.seen.keyProblem && p != "" {
		s.log.Error("election key put without a lease", "problem", p)
	}
	s.seen.keyProblem = p
}

// clearLeaselessKey deletes the election key read as li if it is still that
// key and still on no lease. The next promotion's barrier then waits for
// whoever li names exactly as for any previous holder whose lease is gone.
func (s *Supervisor) clearLeaselessKey(li group.LeaderInfo) func(context.Context) error {
	return func(ctx context.Context) error {
		key := s.keys.Leader()
		rctx, cancel := s.reqCtx(ctx)
		defer cancel()
		_, err := s.pool.Hedged().Txn(rctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", li.Token),
			clientv3.Compare(clientv3.LeaseValue(key), "=", 0),
		).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return fmt.Errorf("delete %s: %w", key, err)
		}
		return nil
	}
}

// leaseWatch reads the holder's election lease's remaining TTL, rarely while
// the holder renews and more often as the lease nears the point where a
// read of it proves the holder past its fence instant (see leaseProof). It
// is owned by the observer goroutine.
type leaseWatch struct {
	lease clientv3.LeaseID
	next  time.Time // no read before then
	// zeroSent, zeroAt: the first read of this lease, since it was last
	// seen renewed, that etcd answered with 0 whole seconds left (sent,
	// answered); zero: none (see tickProof).
	zeroSent, zeroAt time.Time
}

// leaseTickPoll is how often a lease with 1 s or less left is read while
// no single read can prove anything (see tickProof): it bounds how late the
// first "0 s left" is seen, which is how late the proof comes.
const leaseTickPoll = 100 * time.Millisecond

// proofFor returns an instant by which the holder li names has its units
// down, when a read of its lease proves one.
func (s *Supervisor) proofFor(ctx context.Context, w *leaseWatch, li group.LeaderInfo) time.Time {
	if !li.Present() || li.Lease == 0 || li.Node == s.cfg.Node {
		return time.Time{}
	}
	now := s.now()
	if w.lease == li.Lease && now.Before(w.next) {
		return time.Time{}
	}
	alive, left, granted, at, err := s.leaseLeft(ctx, li.Lease)
	if err != nil || !alive {
		w.lease, w.next = li.Lease, now
		return time.Time{}
	}
	if by, ok := s.leaseProof(left, at, li.Node); ok {
		w.lease, w.next = li.Lease, now
		return by
	}
	by := s.tickProof(w, li.Node, li.Lease, left, granted, now, at)
	if !by.IsZero() {
		w.next = now
		return by
	}
	margin := s.proofMargin(li.Node)
	// Unrenewed, the lease reaches the provable range after this long.
	wait := left + time.Second - margin
	w.next = now.Add(max(wait-s.cfg.Units.PollInterval, s.cfg.Units.PollInterval))
	if margin < time.Second {
		// No single read proves anything: catch the read that first says
		// 0 s left early, then read again once tickProof can use it.
		switch {
		case !w.zeroAt.IsZero():
			w.next = later(now.Add(leaseTickPoll), w.zeroAt.Add(time.Second-margin))
		case left <= time.Second:
			w.next = now.Add(leaseTickPoll)
		default:
			w.next = now.Add(max(left-time.Second, leaseTickPoll))
		}
	}
	return time.Time{}
}

// tickProof proves the holder past its fence instant from two reads of its
// lease when one cannot: etcd answers whole seconds (truncated), so "0 s
// left" only says that the lease, unrenewed, expires before that answer
// (received at zeroAt) plus 1 s, which may be more than StopMax + slack
// away. A later read sent once that bound is at most StopMax + slack away
// (sent >= zeroAt + 1 s - (StopMax + slack)) that still finds 0 s left
// shows the lease not renewed since the first (a renewal in between would
// leave at least 1 s while at - zeroSent < renewalGap), so at that read it
// had at most StopMax + slack left and its holder was past its fence
// instant, as in leaseProof (a renewal sent before the read but answered
// after it is not counted: onRenewal); its units are down by the expiry,
// before zeroAt + 1 s
// (our clock may run slow: + TTL*rho). Any read with 1 s or more left
// starts over. sent and at are one read's send and answer times, granted
// the lease's granted TTL as etcd answered it (0: unknown). StopMax +
// slack is the holder's as far as we know (proofMargin).
func (s *Supervisor) tickProof(w *leaseWatch, holder string, lease clientv3.LeaseID, left, granted time.Duration, sent, at time.Time) time.Time {
	if w.lease != lease {
		*w = leaseWatch{lease: lease}
	}
	if left >= time.Second {
		w.zeroSent, w.zeroAt = time.Time{}, time.Time{}
		return time.Time{}
	}
	if left < 0 {
		return time.Time{}
	}
	if w.zeroAt.IsZero() {
		w.zeroSent, w.zeroAt = sent, at
		return time.Time{}
	}
	if at.Sub(w.zeroSent) >= s.renewalGap(granted) {
		// Too far apart to rule out a renewal: this read is the new first.
		w.zeroSent, w.zeroAt = sent, at
		return time.Time{}
	}
	if sent.Before(w.zeroAt.Add(time.Second - s.proofMargin(holder))) {
		return time.Time{}
	}
	return w.zeroAt.Add(time.Second + s.clockPad())
}

// renewalGap is how far apart (our send of the first, our answer of the
// second) two reads of a lease may be for tickProof to rule out a renewal
// between them: a lease renewed then has TTL - 1 s left on etcd's clock
// after TTL - 1 s, and etcd's clock and ours may each run fast or slow by
// rho, so our measure of it is shortened by 2*rho. TTL is the shorter of
// ours and the lease's granted TTL: its holder may run a shorter lease
// than ours.
func (s *Supervisor) renewalGap(granted time.Duration) time.Duration {
	ttl := s.window.TTL
	if granted > 0 {
		ttl = min(ttl, granted)
	}
	return time.Duration(float64(ttl-time.Second) * (1 - 2*s.window.ClockRate))
}

// wake is when the observer should read the lease again before its next
// poll (nil: the poll is soon enough).
func (w *leaseWatch) wake(now time.Time, poll time.Duration) <-chan time.Time {
	if w.next.IsZero() || !w.next.After(now) || w.next.Sub(now) >= poll {
		return nil
	}
	return time.After(w.next.Sub(now))
}
