package supervisor

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// onLeader records the election key as read; a holder that finds its key
// gone or re-created fences at once.
func (s *Supervisor) onLeader(o leaderObs) {
	if o.err != nil {
		return
	}
	if s.term.token != 0 && o.info.Revision < s.term.token {
		return // read before we won: stale
	}
	s.loop.leader = o.info
	s.notePrevHolder(o.info)
	s.noteProof(o.info, o.proof)
	s.checkOwnRecord(o)
	s.seen.members = o.members
	s.noteControl(o.ctl)
	if d := o.ctl.Drill; d != nil && d.Token == s.term.token && s.term.token != 0 && s.loop.state == group.Active && o.ctl.Freeze == nil {
		s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("failover drill %s: fencing as if renewal had failed", d.ID), "drill"
	}
	s.noteLeaselessKey(o.info)
	if s.loop.state.Holding() && o.info.Token == s.term.token && o.info.Lease != s.term.elecLease && s.loop.state != group.Demoting {
		s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("election key (token %d) is no longer on our lease %x but on %x: it was rewritten by hand", s.term.token, s.term.elecLease, o.info.Lease), "key_lost"
	}
	if (s.loop.state == group.Promoting || s.loop.state == group.Active) && o.info.Token != s.term.token {
		if o.info.Present() {
			s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("election key taken over by %s (token %d, ours %d)", o.info.Node, o.info.Token, s.term.token), "key_lost"
		} else {
			s.loop.fenceNow, s.loop.fenceKind = fmt.Sprintf("election key deleted (our token %d)", s.term.token), "key_lost"
		}
	}
}

type leaderObs struct {
	info    group.LeaderInfo
	ctl     group.Control
	err     error
	members map[string]group.Record // every member record at info.Revision
	proof   time.Time               // the holder's units are down by then (see proofFor)
}

// observeLeader reads the election key and the operator's control records
// together on every watch event and every poll interval: the watches make
// reactions fast, the poll makes them certain (a lost watch is followed by
// a fresh read, never trusted silently).
func (s *Supervisor) observeLeader(bg context.Context) {
	t := time.NewTicker(s.cfg.Units.PollInterval)
	defer t.Stop()
	var leaderW, ctlW clientv3.WatchChan
	wctx, wcancel := context.WithCancel(bg)
	newWatch := func() {
		wcancel()
		wctx, wcancel = context.WithCancel(bg)
		leaderW = s.pool.Watch(wctx, s.keys.Leader())
		ctlW = s.pool.Watch(wctx, s.keys.Control(), clientv3.WithPrefix())
	}
	newWatch()
	defer func() { wcancel() }()
	var lw leaseWatch
	var wake <-chan time.Time // the lease watch's next read, when before the poll
	lost := func(wr clientv3.WatchResponse, ok bool) bool {
		if ok && wr.Err() == nil {
			return false
		}
		if sleep(bg, 200*time.Millisecond) == nil {
			newWatch()
		}
		return true
	}
	for {
		select {
		case <-bg.Done():
			return
		case wr, ok := <-leaderW:
			lost(wr, ok)
		case wr, ok := <-ctlW:
			lost(wr, ok)
		case <-t.C:
		case <-wake:
		}
		rctx, cancel := s.reqCtx(bg)
		o := s.readLeaderAndControl(rctx)
		o.proof = s.proofFor(rctx, &lw, o.info)
		offer(s.in.leaders, o)
		cancel()
		wake = lw.wake(s.now(), s.cfg.Units.PollInterval)
	}
}

// readLeaderAndControl reads both in one transaction (one revision).
func (s *Supervisor) readLeaderAndControl(ctx context.Context) leaderObs {
	resp, err := s.pool.Hedged().Txn(ctx).Then(
		clientv3.OpGet(s.keys.Leader()),
		clientv3.OpGet(s.keys.Control(), clientv3.WithPrefix()),
		clientv3.OpGet(s.keys.Members(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return leaderObs{err: fmt.Errorf("read election key and control records: %w", err)}
	}
	li := group.DecodeLeader(resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision)
	members, _ := group.DecodeMembers(s.keys, resp.Responses[2].GetResponseRange().Kvs)
	s.timing.observe(members, s.cfg.Node, s.now())
	return leaderObs{info: li, ctl: group.ParseControl(s.keys, resp.Responses[1].GetResponseRange().Kvs), members: members}
}
