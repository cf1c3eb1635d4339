package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// lease is one etcd lease as granted: its proof of validity dates from when
// the grant was sent (on the fence clock), not from when the answer came.
type lease struct {
	id   clientv3.LeaseID
	sent time.Time
	ttl  time.Duration
}

// leases grants, renews and revokes this member's leases, each request
// through the pool and bounded by the request timeout. Like etcd's
// concurrency.Session it owns nothing but the requests: which leases are
// alive is the loop's business.
type leases struct {
	pool    *etcdconn.Pool
	timeout time.Duration // per request
	log     *slog.Logger
}

// grant creates a lease of ttl, rounded up to whole seconds, recording when
// the request was sent.
func (l leases) grant(ctx context.Context, ttl time.Duration) (lease, error) {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	sent := deadlineNow()
	resp, err := l.pool.Grant(rctx, group.TTLSeconds(ttl))
	if err != nil {
		return lease{}, fmt.Errorf("grant lease: %w", err)
	}
	return lease{id: resp.ID, sent: sent, ttl: time.Duration(resp.TTL) * time.Second}, nil
}

// keepAliveOnce renews id once through every member of the pool at the
// same time and returns the first success (see etcdconn.Pool.KeepAliveOnce):
// gRPC only notices a silently dead connection after its keepalive (10 s
// at the least), and a balanced client would keep sending some renewals
// into it; in parallel, one live member is enough. The endpoint is the
// member whose answer counted ("" when none did). ctx bounds it.
func (l leases) keepAliveOnce(ctx context.Context, id clientv3.LeaseID) (time.Duration, string, error) {
	return l.pool.KeepAliveOnceFrom(ctx, id)
}

// revoke gives a lease back; it reports whether the lease is gone (revoked
// now, or not found). It is bounded by the request timeout alone, so that
// a cancelled job still gives back what it took.
func (l leases) revoke(id clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if err := l.pool.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		l.log.Debug("revoke lease", "lease", fmt.Sprintf("%x", id), "err", err)
		return false
	}
	return true
}

// created is the answer to putOnLease.
type created struct {
	// ours: the key is now ours on the lease, put by this request or by a
	// hedged copy of it that landed first.
	ours bool
	// createRev and modRev are our key's revisions when ours.
	createRev, modRev int64
	// other is the key someone else holds when not ours.
	other *mvccpb.KeyValue
	// rev is the store revision of the answer.
	rev int64
}

// putOnLease creates key with val on lease id unless the key exists: two
// members racing get exactly one winner. Hedged, so one silent etcd member
// cannot hold it up; a copy that lands after another won finds the key on
// our own lease (ownKey), so a retry never wins twice.
func (l leases) putOnLease(ctx context.Context, key, val string, id clientv3.LeaseID) (created, error) {
	rctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	resp, err := l.pool.Hedged().Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(id))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return created{}, err
	}
	c := created{rev: resp.Header.Revision}
	switch kv := ownKey(resp, id); {
	case resp.Succeeded:
		c.ours, c.createRev, c.modRev = true, resp.Header.Revision, resp.Header.Revision
	case kv != nil:
		c.ours, c.createRev, c.modRev = true, kv.CreateRevision, kv.ModRevision
	default:
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			c.other = kvs[0]
		}
	}
	return c, nil
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
