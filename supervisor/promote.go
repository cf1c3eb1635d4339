package supervisor

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// clearHandoff removes a fulfilled switchover request.
func (s *Supervisor) clearHandoff(bg context.Context, id string) {
	ctx, cancel := s.reqCtx(bg)
	defer cancel()
	resp, err := s.pool.Hedged().Get(ctx, s.keys.Handoff())
	if err != nil || len(resp.Kvs) != 1 {
		return
	}
	var h group.Handoff
	if json.Unmarshal(resp.Kvs[0].Value, &h) != nil || h.ID != id {
		return
	}
	_, _ = s.pool.Hedged().Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(s.keys.Handoff()), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(s.keys.Handoff())).Commit()
}

// promoteJob runs the promotion barrier, then starts the units in order; it
// times each step (promotionSteps).
func (s *Supervisor) promoteJob(token int64, prev holderMark) func(context.Context) (*promotionSteps, error) {
	return func(ctx context.Context) (*promotionSteps, error) {
		steps := startSteps(s.now())
		prev = s.replayToWin(ctx, prev, token)
		steps.done("replay", s.now())
		// Barrier: the previous holder's leadership must be over (lease
		// gone, record says stopped, or one full lease waited out), and no
		// other record may say its units may run.
		if err := s.barrier(ctx, prev); err != nil {
			return steps, err
		}
		steps.done("barrier", s.now())
		// The fence at etcd (etcd_fence): the apiserver of any master that
		// may still write is cut off before this term writes anything.
		if err := s.etcdFence.atPromotion(ctx, s.keys.Leader(), token); err != nil {
			return steps, err
		}
		steps.done("etcd fence", s.now())
		if d := s.cfg.Lease.TakeoverDelay; d > 0 {
			s.log.Info("takeover delay", "delay", d)
			if err := sleep(ctx, d); err != nil {
				return steps, err
			}
			steps.done("takeover delay", s.now())
		}
		// Say that units may run BEFORE the first one starts, and make sure
		// etcd has it: that is what the next leader's barrier reads.
		s.term.unitsMayRun.Store(true)
		if err := s.writeRecord(ctx, false); err != nil {
			return steps, fmt.Errorf("publish record before starting units: %w", err)
		}
		steps.done("record", s.now())
		// The token's destinations, in order (tokens.go): fencing.env and
		// on_promote, the API fence, the published term. Only once the
		// last has it would the promotion itself start the units, and from
		// then on the guard may let one start too.
		if err := s.handToken(ctx, token); err != nil {
			return steps, err
		}
		steps.done("token", s.now())
		err := s.term.gate.do(func() error {
			return fencing.StartAll(ctx, s.units, s.cfg.Units.Managed, s.timeout)
		})
		steps.done("start", s.now())
		return steps, err
	}
}

// standbyUnitsDown: the published state is standby and every unit is
// confirmed stopped (any goroutine).
func (s *Supervisor) standbyUnitsDown() bool {
	return s.Term().State == string(group.Standby) && !s.term.unitsMayRun.Load()
}

// termMayAct: the published term may act now, the guard's predicate (any
// goroutine).
func (s *Supervisor) termMayAct() bool { return s.Term().MayAct(deadlineNow()) }
