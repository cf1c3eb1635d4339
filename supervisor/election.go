package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

type grantResult struct {
	lease clientv3.LeaseID
	sent  time.Time
	ttl   time.Duration
	// crashed: a record of an earlier incarnation of this member was
	// still alive, so that incarnation ended without leaving the group.
	crashed bool
}

// grant creates a lease, recording when the request was sent: the proof of
// validity starts then, not when the answer arrived.
func (s *Supervisor) grant(ctx context.Context) (grantResult, error) {
	ttl := s.cfg.Lease.TTL.D()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	sent := deadlineNow()
	resp, err := s.pool.Grant(rctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return grantResult{}, fmt.Errorf("grant lease: %w", err)
	}
	return grantResult{lease: resp.ID, sent: sent, ttl: time.Duration(resp.TTL) * time.Second}, nil
}

type acquireResult struct {
	won    bool
	lease  clientv3.LeaseID
	sent   time.Time
	ttl    time.Duration
	token  int64
	leader LeaderInfo
}

// acquireJob tries once to create the election key on a fresh lease. The
// transaction succeeds only if no key exists, so two members racing get
// exactly one winner. The winner re-reads the key to confirm it is still
// its own (same CreateRevision, same lease) before anything starts.
func (s *Supervisor) acquireJob(ctx context.Context) (acquireResult, error) {
	if err := s.dropinsStillGood(ctx); err != nil {
		return acquireResult{}, err
	}
	g, err := s.grant(ctx)
	if err != nil {
		return acquireResult{}, err
	}
	key := s.keys.Leader()
	rctx, cancel := s.reqCtx(ctx)
	// Hedged: a copy that lands after another won finds the key on our
	// own lease (ownKey), so a retry never wins twice.
	resp, err := s.pool.Hedged().Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.cfg.Node, clientv3.WithLease(g.lease))).
		Else(clientv3.OpGet(key)).Commit()
	cancel()
	if err != nil {
		s.revoke(g.lease)
		return acquireResult{}, fmt.Errorf("campaign: %w", err)
	}
	token := resp.Header.Revision
	if kv := ownKey(resp, g.lease); kv != nil {
		token = kv.CreateRevision
	} else if !resp.Succeeded {
		s.revoke(g.lease)
		li := LeaderInfo{Revision: resp.Header.Revision}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			li.Node, li.Token, li.Lease = string(kvs[0].Value), kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease)
		}
		return acquireResult{leader: li}, nil
	}
	rctx, cancel = s.reqCtx(ctx)
	li, err := ReadLeader(rctx, s.pool.Hedged(), s.keys)
	cancel()
	if err != nil || li.Token != token || li.Lease != g.lease {
		s.revoke(g.lease)
		if err == nil {
			err = fmt.Errorf("election key changed right after winning it (token %d, now %d by %q)", token, li.Token, li.Node)
		}
		return acquireResult{}, fmt.Errorf("verify election key: %w", err)
	}
	// Before anything can start under this lease: a successor started after
	// a crash must find it to give it back.
	s.saveRunState(func(st *runstate.State) { st.ElectionLease, st.Token = int64(g.lease), token })
	return acquireResult{won: true, lease: g.lease, sent: g.sent, ttl: g.ttl, token: token}, nil
}

// release gives up the election key (only if it is still ours) and its
// lease, so the next member can win at once instead of after the TTL. It
// reports whether etcd confirmed both.
func (s *Supervisor) release(ctx context.Context, token int64, lease clientv3.LeaseID) bool {
	if token == 0 {
		return true
	}
	key := s.keys.Leader()
	rctx, cancel := s.reqCtx(ctx)
	_, err := s.pool.Hedged().Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).
		Then(clientv3.OpDelete(key)).Commit()
	cancel()
	if err != nil {
		s.log.Warn("release election key", "err", err)
	}
	return s.revoke(lease) && err == nil
}

// revoke gives a lease back; it reports whether the lease is gone (revoked
// now, or not found).
func (s *Supervisor) revoke(lease clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Etcd.RequestTimeout.D())
	defer cancel()
	if err := s.pool.Revoke(ctx, lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.log.Debug("revoke lease", "lease", fmt.Sprintf("%x", lease), "err", err)
		return false
	}
	return true
}

// ownKey is the key an Else(OpGet) found when it is on lease: a hedged
// copy of a CreateRevision == 0 transaction that came after the first one
// had already put it. Nil otherwise.
func ownKey(resp *clientv3.TxnResponse, lease clientv3.LeaseID) *mvccpb.KeyValue {
	if resp.Succeeded || len(resp.Responses) == 0 {
		return nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 && clientv3.LeaseID(kvs[0].Lease) == lease {
		return kvs[0]
	}
	return nil
}
