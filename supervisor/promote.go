package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// promoteJob runs the promotion barrier, then starts the units in order.
func (s *Supervisor) promoteJob(token int64, prev holderMark) func(context.Context) error {
	return func(ctx context.Context) error {
		go s.resetSilentMembers(ctx)
		// Barrier: the previous holder's leadership must be over (lease
		// gone, record says stopped, or one full lease waited out), and no
		// other record may say its units may run.
		if err := s.barrier(ctx, prev); err != nil {
			return err
		}
		if d := s.cfg.Lease.TakeoverDelay; d > 0 {
			s.log.Info("takeover delay", "delay", d)
			if err := sleep(ctx, d); err != nil {
				return err
			}
		}
		// Say that units may run BEFORE the first one starts, and make sure
		// etcd has it: that is what the next leader's barrier reads.
		s.term.unitsMayRun.Store(true)
		if err := s.writeRecord(ctx, false); err != nil {
			return fmt.Errorf("publish record before starting units: %w", err)
		}
		// The token's destinations, in order (tokens.go): fencing.env and
		// on_promote, the API fence, the published term. Only once the
		// last has it would the promotion itself start the units, and from
		// then on the guard may let one start too.
		if err := s.handToken(ctx, token); err != nil {
			return err
		}
		return s.term.gate.do(func() error {
			return fencing.StartAll(ctx, s.units, s.cfg.Units.Managed, s.timeout)
		})
	}
}

// resetSilentMembers destroys this host's connections to the etcd members
// that do not answer now (Options.ResetConnectionsTo). It runs beside the
// barrier and the start and delays neither: a member a partition took away
// keeps its established connections from the node's kube-apiserver in
// gRPC's ready set, and part of the requests of the components this
// promotion starts would wait on them for the apiserver's TCP user timeout
// or keepalive (10-40 s, issue 21's scenario 46). Reset, they reconnect,
// fail to, and the requests go to the members that answer. Safety does not
// depend on it; a member slow rather than gone costs its requests in
// flight one error.
func (s *Supervisor) resetSilentMembers(job context.Context) {
	if s.opts.ResetConnectionsTo == nil {
		return
	}
	// Not the job's context: the start may well end the job before the
	// slowest answer is due, and an unheard answer would count as silence.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(job), s.cfg.Etcd.RequestTimeout)
	silent := s.pool.Silent(ctx)
	cancel()
	if len(silent) == 0 {
		return
	}
	start := deadlineNow()
	n, err := s.opts.ResetConnectionsTo(silent)
	took := deadlineNow().Sub(start).Round(time.Microsecond)
	if err != nil {
		s.log.Warn("promotion: connections to silent etcd members not all reset; requests on them wait for the apiserver's TCP timeout",
			"silent", silent, "destroyed", n, "took", took, "err", err)
		return
	}
	s.log.Info("promotion: connections to silent etcd members reset", "silent", silent, "destroyed", n, "took", took)
}
