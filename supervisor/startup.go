package supervisor

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// startupJob reconciles (stops whatever managed unit runs: this process
// holds nothing yet), then registers the member record on a fresh lease.
func (s *Supervisor) startupJob(ctx context.Context) (grantResult, error) {
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	if err != nil {
		return grantResult{}, fmt.Errorf("read managed units: %w", err)
	}
	if r := runningUnits(states); len(r) > 0 {
		s.log.Warn("start-up: managed units found running; stopping them before anything else", "units", r)
		if err := fencing.StopAll(ctx, s.units, s.cfg.Units.Managed, s.timeout); err != nil {
			return grantResult{}, fmt.Errorf("start-up reconcile: %w", err)
		}
	}
	s.unitsMayRun.Store(false)
	prev := s.loadPredecessor()
	crashed, warned := false, false
	for {
		g, err := s.grant(ctx)
		if err != nil {
			return grantResult{}, err
		}
		rec := marshalRecord(s.record())
		key := s.keys.Member(s.cfg.Node)
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.pool.Hedged().Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(rec), clientv3.WithLease(g.lease))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err == nil && resp.Succeeded {
			return s.registered(g, resp.Header.Revision, crashed, prev), nil
		}
		if err == nil {
			if kv := ownKey(resp, g.lease); kv != nil {
				// A hedged copy of our own create landed first.
				return s.registered(g, kv.ModRevision, crashed, prev), nil
			}
			// Our previous incarnation's record, on the lease it saved?
			rev, ok, rerr := s.replacePredecessorRecord(ctx, prev, g.lease, rec)
			if rerr == nil && ok {
				s.log.Info("replaced the record our previous incarnation left; giving back its leases", "incarnation", prev.Incarnation)
				return s.registered(g, rev, true, prev), nil
			}
			err = rerr
		}
		s.revoke(g.lease)
		if err != nil {
			return grantResult{}, fmt.Errorf("register member record: %w", err)
		}
		// A record under our name is alive: an earlier incarnation of this
		// process (killed, its lease not yet expired) or, if it never goes
		// away, another machine configured with the same node name.
		crashed = true
		if !warned {
			s.warnNameInUse(resp)
			warned = true
		}
		if err := sleep(ctx, s.cfg.Units.PollInterval.D()); err != nil {
			return grantResult{}, err
		}
	}
}

// registered finishes a registration at rev: our predecessor's leases go
// back (our units are confirmed stopped), and the run state is ours.
func (s *Supervisor) registered(g grantResult, rev int64, crashed bool, prev predecessor) grantResult {
	s.pubMu.Lock()
	s.wrote(rev, false)
	s.pubMu.Unlock()
	s.givePredecessorLeasesBack(prev)
	s.publishPredecessorFence(context.Background(), prev)
	s.saveRunState(func(st *runstate.State) {
		*st = runstate.State{MemberLease: int64(g.lease)}
	})
	g.crashed = crashed
	return g
}

// warnNameInUse says once (not every poll) that another record holds our
// name, and what it says.
func (s *Supervisor) warnNameInUse(resp *clientv3.TxnResponse) {
	var other Record
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		_ = json.Unmarshal(kvs[0].Value, &other)
	}
	s.log.Warn("a live member record already uses this node name; waiting for it to expire",
		"incarnation", other.Incarnation, "state", other.State, "hint", "if this persists, two machines share the node name")
}

// leaveJob ends the membership. The record is not deleted: it says this
// member stopped with its units down and lapses with its lease, so that a
// peer's barrier can read that rather than find no trace at all (which it
// must wait out); a successor on this machine replaces it at once (see
// replacePredecessorRecord).
func (s *Supervisor) leaveJob(lease clientv3.LeaseID) func(context.Context) error {
	return func(ctx context.Context) error {
		if lease == 0 {
			return nil
		}
		err := s.putRecord(ctx, func(r *Record) {
			r.State, r.UnitsRunning, r.Released, r.Reason = Stopped, false, true, "left the group"
		})
		if err != nil {
			s.log.Warn("could not publish that we left; revoking our record", "err", err)
			s.revoke(lease)
		}
		return nil
	}
}
