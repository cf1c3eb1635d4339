package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// recordWriter is how our member record reaches etcd: every write holds mu
// and is a compare-and-swap on rev (putRecord); the publisher goroutine
// writes when woken. Any goroutine may write.
type recordWriter struct {
	mu   sync.Mutex    // serialises record writes, see writeRecord
	wake chan struct{} // asks the publisher goroutine for a write
	// rev is the ModRevision of our last successful record write (0: none,
	// or the record must be created); hold is that of the first write that
	// said units_running while it still says so. Set under mu.
	rev  atomic.Int64
	hold atomic.Int64
	// lease is the member lease (0: none): no record without it.
	lease atomic.Int64
}

// record builds this member's record from the latest snapshot.
func (s *Supervisor) record() group.Record {
	st := s.Status()
	r := group.Record{
		Node: s.cfg.Node, Incarnation: s.inc, State: st.State, UnitsRunning: s.term.unitsMayRun.Load(),
		Token: st.Token, Version: s.opts.Version, Since: st.Since, From: st.From, Reason: st.Reason,
		Cooldown: st.CooldownUntil, Host: hostName, Published: s.now(), APIFence: apiFenceRecord(st.APIFence),
	}
	a := s.agreement()
	r.Agree, r.Fingerprint = &a, a.Fingerprint()
	if s.timing != nil {
		t := s.timing.own()
		r.Timing = &t
	}
	if st.State.Holding() {
		r.LeaseLeftMS = st.LeaseLeft.Milliseconds()
	}
	for _, u := range st.Units {
		r.Units = append(r.Units, group.UnitStatus{Name: u.Name, State: u.ActiveState, Health: s.health.State(u.Name)})
	}
	return r
}

// writeRecord publishes the record. Writes are serialised and read
// unitsMayRun under the same lock, and each is a compare-and-swap on the
// ModRevision of our last successful write: a write that timed out on the
// client but commits later (raft does not apply in the order calls
// returned) finds the key changed and does nothing, so a late "stopped"
// can never land after a later "running". A lost race (a write of ours
// that landed after all) is re-read and the current view written over it.
// A record that vanished is created again, on our member lease.
func (s *Supervisor) writeRecord(ctx context.Context, released bool) error {
	return s.putRecord(ctx, func(r *group.Record) { r.Released = released })
}

// putRecord writes our record as built now, adjusted by edit (see
// writeRecord).
func (s *Supervisor) putRecord(ctx context.Context, edit func(*group.Record)) error {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	lease := clientv3.LeaseID(s.rec.lease.Load())
	if lease == 0 {
		return errors.New("no member lease")
	}
	key := s.keys.Member(s.cfg.Node)
	for range 3 {
		r := s.record()
		edit(&r)
		b, _ := json.Marshal(r)
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.pool.Serial().Txn(rctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", s.rec.rev.Load())).
			Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("write member record: %w", err)
		}
		if resp.Succeeded {
			s.wrote(resp.Header.Revision, r.UnitsRunning)
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		switch {
		case len(kvs) == 0 && r.UnitsRunning && s.rec.hold.Load() != 0:
			// Our record vanished while our units may run: the others'
			// barrier relied on it. The loop fences (checkOwnRecord); the
			// fence's own write, units stopped, may create it again.
			return fmt.Errorf("write member record: %s vanished while our units may run", key)
		case len(kvs) == 0:
			s.rec.rev.Store(0) // vanished: create it again
		case clientv3.LeaseID(kvs[0].Lease) == lease:
			s.rec.rev.Store(kvs[0].ModRevision) // a late write of ours: overwrite it
		default:
			return fmt.Errorf("write member record: key %s is on lease %x, not our lease %x", key, kvs[0].Lease, lease)
		}
	}
	return fmt.Errorf("write member record: %s kept changing under us", key)
}

// wrote notes a successful record write at rev.
func (s *Supervisor) wrote(rev int64, unitsRunning bool) {
	s.rec.rev.Store(rev)
	switch {
	case !unitsRunning:
		s.rec.hold.Store(0)
	case s.rec.hold.Load() == 0:
		s.rec.hold.Store(rev)
	}
}

// publisher writes the record after transitions, off the loop.
func (s *Supervisor) publisher(bg context.Context) {
	for {
		select {
		case <-bg.Done():
			return
		case <-s.rec.wake:
			if s.rec.lease.Load() == 0 {
				continue
			}
			if err := s.writeRecord(bg, false); err != nil {
				s.log.Debug("publish record", "err", err)
			}
		}
	}
}

// wroteRevision adopts rev as the revision of our last record write.
func (s *Supervisor) wroteRevision(rev int64) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	s.rec.rev.Store(rev)
}
