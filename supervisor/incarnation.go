package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// saveRunState records this incarnation's leases and token on /run (see
// package runstate) so that a successor started after a crash can give
// them back at once. Called from jobs; a failure is logged, not fatal: the
// successor then waits out the leases as it always could.
func (s *Supervisor) saveRunState(update func(*runstate.State)) {
	if s.kept.store == nil {
		return
	}
	s.kept.mu.Lock()
	defer s.kept.mu.Unlock()
	update(&s.kept.state)
	s.kept.state.Node, s.kept.state.Cluster, s.kept.state.Incarnation, s.kept.state.SavedAt = s.cfg.Node, s.cfg.Cluster, s.inc, s.now()
	if err := s.kept.store.Save(s.kept.state); err != nil {
		s.log.Warn("could not save run state; a restart will wait out our leases", "err", err)
	}
}

// SaveFenced leaves a note of a fence for the successor to publish (called
// by the fence path once the units are confirmed down).
func (s *Supervisor) SaveFenced(f runstate.Fenced) {
	s.saveRunState(func(st *runstate.State) { st.Fenced = &f })
}

// predecessor is the previous incarnation of this member as it saved
// itself, if it ran on this machine since boot.
type predecessor struct {
	runstate.State
	ok bool
}

func (s *Supervisor) loadPredecessor() predecessor {
	if s.kept.store == nil {
		return predecessor{}
	}
	st, ok, err := s.kept.store.Load()
	if err != nil {
		s.log.Warn("cannot read the previous incarnation's run state; ignoring it", "err", err)
		return predecessor{}
	}
	if !ok || st.Node != s.cfg.Node || st.Cluster != s.cfg.Cluster || st.Incarnation == s.inc {
		return predecessor{}
	}
	return predecessor{State: st, ok: true}
}

// replacePredecessorRecord puts our new record over the one our previous
// incarnation left on its still-live member lease. Our units are confirmed
// stopped (start-up stopped them), so the record truthfully says so, and a
// peer's barrier waiting for that node may pass. It reports whether the
// record was ours to replace.
func (s *Supervisor) replacePredecessorRecord(ctx context.Context, p predecessor, lease clientv3.LeaseID, rec []byte) (int64, bool, error) {
	if !p.ok || p.MemberLease == 0 {
		return 0, false, nil
	}
	key := s.keys.Member(s.cfg.Node)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.pool.Serial().Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", p.MemberLease)).
		Then(clientv3.OpPut(key, string(rec), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return 0, false, fmt.Errorf("replace our previous incarnation's record: %w", err)
	}
	return resp.Header.Revision, resp.Succeeded, nil
}

// givePredecessorLeasesBack revokes the leases our previous incarnation
// left behind: with the election lease goes its key, so a peer wins at
// once instead of after the TTL. Only after our units were confirmed
// stopped. A drill's fence asked to rehearse the full wait: its election
// lease is left to expire.
func (s *Supervisor) givePredecessorLeasesBack(p predecessor) {
	if !p.ok {
		return
	}
	if p.ElectionLease != 0 && (p.Fenced == nil || !p.Fenced.KeepLease) {
		s.log.Info("giving back our previous incarnation's election lease", "lease", fmt.Sprintf("%x", p.ElectionLease), "token", p.Token)
		s.leases.revoke(clientv3.LeaseID(p.ElectionLease))
	}
	if p.MemberLease != 0 {
		s.leases.revoke(clientv3.LeaseID(p.MemberLease))
	}
}

func marshalRecord(r group.Record) []byte {
	b, _ := json.Marshal(r)
	return b
}

// publishPredecessorFence puts the fence our predecessor noted into the
// history, at the time it began, unless the fencing process recorded it
// itself (an event of this node going to fenced, with that token, since).
func (s *Supervisor) publishPredecessorFence(ctx context.Context, p predecessor) {
	if !p.ok || p.Fenced == nil {
		return
	}
	f := p.Fenced
	rctx, cancel := s.reqCtx(ctx)
	evs, err := group.ReadHistory(rctx, s.cli, s.keys, 50)
	cancel()
	if err != nil {
		s.log.Warn("cannot read the history; publishing our predecessor's fence anyway", "err", err)
	}
	for _, e := range evs {
		if e.Node == s.cfg.Node && e.To == group.Fenced && e.Token == f.Token && !e.At.Before(f.At) {
			return
		}
	}
	s.recordHistory(group.Event{At: f.At, Node: s.cfg.Node, From: group.Fencing, To: group.Fenced, Kind: "fenced", Token: f.Token,
		Reason: fmt.Sprintf("%s: %s (noted by incarnation %s, published by its successor)", f.Kind, f.Reason, p.Incarnation)})
}

// fenceNoted fences, then (the units are down, so this widens no window)
// leaves a note of it in the run state: the successor publishes it if the
// history lacks it, and leaves a drill's election lease to expire.
func (s *Supervisor) fenceNoted(bg context.Context, kind, reason string) error {
	at, token := s.now(), s.term.token
	err := s.fence(bg, kind, reason)
	s.SaveFenced(runstate.Fenced{At: at, Kind: kind, Reason: reason, Token: token, KeepLease: kind == "drill"})
	return err
}

// keptState is what this process leaves on /run for a restarted successor:
// any goroutine may update it (saveRunState), one at a time.
type keptState struct {
	store *runstate.Store // nil without Options.RunStateDir
	mu    sync.Mutex      // guards state and the file
	state runstate.State
	// pred is the previous incarnation as New read it: before the loop
	// runs, so before anything of ours (a holder the loop notes, even
	// before start-up) can replace the file. Read by start-up only.
	pred predecessor
}

// keepHolder saves the holder of the election key a read at store
// revision rev showed, for a successor (runstate.Holder): a process the
// watchdog kills after a freeze would otherwise leave its successor knowing
// no holder at all, whose barrier then waits one full lease from its first
// look, where this process would have passed as soon as that holder's
// record said its units were down (lab scenario 70). The etcd cluster ID
// goes with it: revisions mean nothing in another cluster.
func (s *Supervisor) keepHolder(node string, lease clientv3.LeaseID, token, rev int64) {
	s.seen.holderKept = s.now()
	cluster := s.pool.ClusterID()
	s.saveRunState(func(st *runstate.State) {
		st.Holder = &runstate.Holder{Node: node, Lease: int64(lease), Token: token, Revision: rev, ClusterID: cluster}
	})
}

// holderKeepEvery is how often a read that shows the same holder saves its
// revision again: a successor replays the election key's history from the
// saved revision, and etcd compacts old history away (the apiserver every
// 5 minutes), which leaves the successor knowing no holder.
const holderKeepEvery = 10 * time.Second

// predecessorHolder is the last other holder of the election key as of
// store revision upTo (our registration's write): the holder our
// predecessor last saw, brought up to date by the key's history since
// (replayHolder). The history is what makes it as good as a look of our
// own: a member that took the key after our predecessor's last look, and
// whose key and record are gone now, is found there and waited for. Zero
// (so the barrier waits as for a holder never seen) when there is nothing
// to go on, the saved holder is of another etcd cluster, or the history
// cannot be read in time or was compacted.
func (s *Supervisor) predecessorHolder(ctx context.Context, p predecessor, upTo int64) holderMark {
	if !p.ok || p.Holder == nil || p.Holder.Token == 0 || p.Holder.Revision <= 0 || upTo <= p.Holder.Revision ||
		p.Holder.ClusterID == 0 || p.Holder.ClusterID != s.pool.ClusterID() {
		return holderMark{}
	}
	h := holderMark{Node: p.Holder.Node, Lease: clientv3.LeaseID(p.Holder.Lease), Token: p.Holder.Token}
	// The leader key and the member records up to ours: our own record's
	// write at upTo ends the replay, with every earlier event delivered.
	h, ok := s.replayHolder(ctx, h, p.Holder.Revision+1, upTo, s.keys.Member(s.cfg.Node)+"\x00")
	if !ok {
		return holderMark{}
	}
	h.ReplayedTo = upTo
	return h
}

// replayHolder brings h, the holder of the election key as of store
// revision from-1, up to revision upTo from the key's history: a watch
// from `from` over [leader key, end), which must hold a write at upTo
// (that event ends it, every earlier one delivered in order). Another
// member's create, or a rewrite of the key by hand, makes its writer the
// holder; our own creates are nobody to wait for (as in notePrevHolder).
// ok is false when the history is compacted, cannot be read within twice
// the request timeout, or ends early.
func (s *Supervisor) replayHolder(ctx context.Context, h holderMark, from, upTo int64, end string) (holderMark, bool) {
	wctx, cancel := context.WithTimeout(ctx, 2*s.opTimeout())
	defer cancel()
	leader := s.keys.Leader()
	for resp := range s.pool.Watch(wctx, leader, clientv3.WithRange(end), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			s.log.Info("cannot replay the election key's history; the barrier waits as for an unknown holder", "from_revision", from, "to_revision", upTo, "err", err)
			return holderMark{}, false
		}
		for _, ev := range resp.Events {
			kv := ev.Kv
			if kv.ModRevision >= upTo {
				return h, true
			}
			if ev.Type == clientv3.EventTypePut && string(kv.Key) == leader && kv.CreateRevision >= h.Token && string(kv.Value) != s.cfg.Node {
				h = holderMark{Node: string(kv.Value), Lease: clientv3.LeaseID(kv.Lease), Token: kv.CreateRevision}
			}
		}
	}
	s.log.Info("the election key's history was not read in time; the barrier waits as for an unknown holder", "from_revision", from, "to_revision", upTo)
	return holderMark{}, false
}

// adoptPredecessorHolder makes the holder replayed at start-up the one the
// next promotion's barrier waits for, unless this process has seen one
// itself by now (a later one), and keeps it for our own successor. The
// promotion replays again from upTo to its win (replayToWin): a holder
// between the two is then not missed either.
func (s *Supervisor) adoptPredecessorHolder(h holderMark, upTo int64) {
	if !h.known() || s.term.prevHolder.known() {
		return
	}
	h.Seen = s.now()
	s.term.prevHolder = h
	s.keepHolder(h.Node, h.Lease, h.Token, upTo-1)
	s.log.Info("start-up: the barrier waits for the election key's last holder our previous incarnation saw", "holder", h.Node, "token", h.Token, "lease", fmt.Sprintf("%x", h.Lease))
}

// replayToWin brings a holder known only from a replay (ReplayedTo set) up
// to our win: the election key's history from ReplayedTo to our own create
// at token. Anything short of that makes the holder unknown, with the
// blind wait from our first look (unknownSince), as if we had never had
// our predecessor's knowledge. A holder this process saw itself needs
// none of this.
func (s *Supervisor) replayToWin(ctx context.Context, prev holderMark, token int64) holderMark {
	if prev.ReplayedTo == 0 || prev.Unknown || prev.ReplayedTo >= token {
		return prev
	}
	h, ok := s.replayHolder(ctx, prev, prev.ReplayedTo+1, token, s.keys.Leader()+"\x00")
	if !ok {
		return holderMark{Unknown: true, Seen: prev.unknownSince}
	}
	if h.Token != prev.Token {
		s.log.Info("promotion: the election key had another holder after our previous incarnation's", "holder", h.Node, "token", h.Token)
	}
	// A replayed mark has no proof of its holder's units being down
	// (noteProof only proves what the loop itself saw): nothing else to keep.
	h.Seen = prev.Seen
	return h
}
