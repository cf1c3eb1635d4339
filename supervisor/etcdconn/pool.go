package etcdconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// ErrForeignCluster marks an answer from a member of another etcd cluster
// than the one the pool was verified against. Such an answer is never a
// proof of anything, and its "lease not found" never fences a holder.
var ErrForeignCluster = errors.New("endpoint belongs to another etcd cluster")

// Pool sends the requests that decide or observe leadership through one
// client per etcd member, so a member that lost its raft leader (a minority
// partition) or went silent (a blackhole) cannot hold a request up: every
// request carries clientv3.WithRequireLeader, so a leaderless member
// rejects it at once, and the pool moves on to the next member. A balanced
// client cannot do that: it keeps picking the bad member for some requests
// until gRPC's keepalive, at least 10 s, notices, and a partitioned member
// still answers pings.
//
// Every answer's header is checked against the etcd cluster ID the pool
// was verified against (see Verify): a member of another cluster is
// refused and never counted.
type Pool struct {
	members    []*poolMember
	hedgeAfter time.Duration
	log        *slog.Logger
	cluster    atomic.Uint64 // expected etcd cluster ID; 0 until known
	prefer     atomic.Int32  // index of the member that answered last
	rechecks   sync.WaitGroup
}

type poolMember struct {
	cli      *clientv3.Client
	endpoint string        // its one endpoint, or "balanced" for a client of several
	cluster  atomic.Uint64 // cluster ID from its last answer; 0 while unknown
	foreign  atomic.Bool   // logged once per change
}

// PoolOptions tune a Pool.
type PoolOptions struct {
	// HedgeAfter is how long a request waits for a member before it is
	// also sent to the next one; 0 means 100 ms.
	HedgeAfter time.Duration
	// ClusterID is the etcd cluster every member must belong to; 0 means
	// learn it from Verify (or, without Verify, from the first answer).
	ClusterID uint64
	Log       *slog.Logger
}

// HedgeDelay is the pool's HedgeAfter for a configuration: a fifth of the
// request timeout, between 20 and 250 ms. A healthy member answers in
// milliseconds; a second copy after that costs one request.
func HedgeDelay(cfg config.Etcd) time.Duration {
	return min(max(cfg.RequestTimeout/5, 20*time.Millisecond), 250*time.Millisecond)
}

// NewPool builds a pool over clients (normally one per endpoint, see
// PerEndpoint; a balanced client may be added for endpoints that have
// none). It does no I/O; the caller keeps ownership of the clients.
func NewPool(clients []*clientv3.Client, o PoolOptions) (*Pool, error) {
	if len(clients) == 0 {
		return nil, errors.New("etcd pool: no clients")
	}
	if o.HedgeAfter <= 0 {
		o.HedgeAfter = 100 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	p := &Pool{hedgeAfter: o.HedgeAfter, log: o.Log}
	p.cluster.Store(o.ClusterID)
	for _, c := range clients {
		m := &poolMember{cli: c, endpoint: "balanced"}
		if eps := c.Endpoints(); len(eps) == 1 {
			m.endpoint = eps[0]
		}
		p.members = append(p.members, m)
	}
	return p, nil
}

// Clients are the pool's clients, in order.
func (p *Pool) Clients() []*clientv3.Client {
	out := make([]*clientv3.Client, len(p.members))
	for i, m := range p.members {
		out[i] = m.cli
	}
	return out
}

// Foreign lists the endpoints whose last answer came from another etcd
// cluster.
func (p *Pool) Foreign() []string {
	var out []string
	for _, m := range p.members {
		if m.foreign.Load() {
			out = append(out, m.endpoint)
		}
	}
	return out
}

// Endpoints are the endpoints of the pool's single-endpoint members, in
// pool order (those Silent asks).
func (p *Pool) Endpoints() []string {
	var out []string
	for _, m := range p.members {
		if m.endpoint != "balanced" {
			out = append(out, m.endpoint)
		}
	}
	return out
}

// Silent asks every single-endpoint member for its status and returns
// the endpoints that gave no answer before ctx ended, in pool order. A
// member of another etcd cluster answers, so it is not silent. The
// promotion uses it to find the members this node cannot reach (a
// partition, a blackhole route), whose established connections the
// node's other etcd clients would keep using until gRPC's keepalive or
// TCP's user timeout gives up on them.
func (p *Pool) Silent(ctx context.Context) []string {
	answered := make([]bool, len(p.members))
	var wg sync.WaitGroup
	for i, m := range p.members {
		if m.endpoint == "balanced" {
			answered[i] = true
			continue
		}
		wg.Go(func() {
			_, err := m.cli.Status(ctx, m.endpoint)
			answered[i] = err == nil
		})
	}
	wg.Wait()
	var out []string
	for i, m := range p.members {
		if !answered[i] {
			out = append(out, m.endpoint)
		}
	}
	return out
}

// ClusterID is the etcd cluster ID the pool accepts (0 while unknown).
func (p *Pool) ClusterID() uint64 { return p.cluster.Load() }

// Verify asks every single-endpoint member for its status and checks that
// all that answer belong to one etcd cluster, the pool's if it has one. A
// disagreement is an error naming each endpoint's cluster ID: the
// configuration mixes clusters, and no answer from the odd one may count.
// Members that do not answer now are checked on their first answer.
func (p *Pool) Verify(ctx context.Context) error {
	ids := make([]uint64, len(p.members))
	var wg sync.WaitGroup
	for i, m := range p.members {
		if m.endpoint == "balanced" {
			continue
		}
		wg.Go(func() {
			if resp, err := m.cli.Status(ctx, m.endpoint); err == nil && resp.Header != nil {
				ids[i] = resp.Header.ClusterId
			}
		})
	}
	wg.Wait()
	want := p.cluster.Load()
	if want == 0 {
		want = majority(ids)
	}
	var bad []string
	var all []string
	for i, m := range p.members {
		if ids[i] == 0 {
			continue
		}
		m.cluster.Store(ids[i])
		all = append(all, fmt.Sprintf("%s: %x", m.endpoint, ids[i]))
		if ids[i] != want {
			bad = append(bad, m.endpoint)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %v answer(s) for a different etcd cluster than the others (cluster IDs %v); every endpoint in etcd.endpoints must be a member of the same cluster",
			ErrForeignCluster, bad, all)
	}
	p.cluster.Store(want)
	return nil
}

// majority is the most frequent non-zero value (the first on a tie).
func majority(ids []uint64) uint64 {
	count := map[uint64]int{}
	var best uint64
	for _, id := range ids {
		if id == 0 {
			continue
		}
		count[id]++
		if best == 0 || count[id] > count[best] {
			best = id
		}
	}
	return best
}

// order is the members to try, starting with the one that answered last.
func (p *Pool) order() []*poolMember {
	n := len(p.members)
	start := int(p.prefer.Load()) % n
	out := make([]*poolMember, 0, n)
	for i := range n {
		out = append(out, p.members[(start+i)%n])
	}
	return out
}

func (p *Pool) preferMember(m *poolMember) {
	for i, x := range p.members {
		if x == m {
			p.prefer.Store(int32(i))
			return
		}
	}
}

// admit checks an answer's cluster ID: an answer from another cluster
// becomes ErrForeignCluster (logged once per change of the member's mind).
func (p *Pool) admit(m *poolMember, id uint64) error {
	if id == 0 {
		return nil
	}
	want := p.cluster.Load()
	if want == 0 {
		p.cluster.CompareAndSwap(0, id)
		want = p.cluster.Load()
	}
	m.cluster.Store(id)
	if id == want {
		if m.foreign.Swap(false) {
			p.log.Info("etcd endpoint answers for our cluster again", "endpoint", m.endpoint, "cluster_id", fmt.Sprintf("%x", id))
		}
		return nil
	}
	if !m.foreign.Swap(true) {
		p.log.Error("etcd endpoint belongs to another etcd cluster; its answers are ignored: fix etcd.endpoints",
			"endpoint", m.endpoint, "cluster_id", fmt.Sprintf("%x", id), "want", fmt.Sprintf("%x", want))
	}
	return fmt.Errorf("%s: %w (cluster ID %x, ours %x)", m.endpoint, ErrForeignCluster, id, want)
}

// verified reports whether m's last answer came from our cluster, which
// is what makes a "lease not found" from it final. A balanced client may
// ask another member next time, so it is verified only as the sole client.
func (p *Pool) verified(m *poolMember) bool {
	if m.endpoint == "balanced" && len(p.members) > 1 {
		return false
	}
	id := m.cluster.Load()
	return id != 0 && id == p.cluster.Load()
}

// clusterOf reads the cluster ID in an answer's header (0 if none).
func clusterOf(v any) uint64 {
	var h *pb.ResponseHeader
	switch r := v.(type) {
	case *clientv3.TxnResponse:
		h = r.Header
	case *clientv3.GetResponse:
		h = r.Header
	case *clientv3.PutResponse:
		h = r.Header
	case *clientv3.DeleteResponse:
		h = r.Header
	case *clientv3.LeaseGrantResponse:
		h = r.ResponseHeader
	case *clientv3.LeaseRevokeResponse:
		h = r.Header
	case *clientv3.LeaseKeepAliveResponse:
		h = r.ResponseHeader
	case *clientv3.AuthUserGetResponse:
		h = r.Header
	case *clientv3.AuthUserGrantRoleResponse:
		h = r.Header
	case *clientv3.AuthUserRevokeRoleResponse:
		h = r.Header
	case clientv3.OpResponse:
		switch {
		case r.Txn() != nil:
			h = r.Txn().Header
		case r.Get() != nil:
			h = r.Get().Header
		case r.Put() != nil:
			h = r.Put().Header
		case r.Del() != nil:
			h = r.Del().Header
		}
	}
	if h == nil {
		return 0
	}
	return h.ClusterId
}

type result[T any] struct {
	m   *poolMember
	v   T
	err error
}

// call runs fn on m with the leader requirement and checks the answer.
func call[T any](ctx context.Context, p *Pool, m *poolMember, fn func(context.Context, *clientv3.Client) (T, error)) result[T] {
	v, err := fn(clientv3.WithRequireLeader(ctx), m.cli)
	if err == nil {
		err = p.admit(m, clusterOf(v))
	}
	return result[T]{m: m, v: v, err: err}
}

// Hedged sends fn to the member that answered last, and to the next one
// whenever the previous failed or HedgeAfter passed without an answer,
// until one succeeds; the others are then cancelled. For reads and for
// writes that cannot take effect twice (a CreateRevision == 0 compare).
// discard, if set, receives every later success (a lease granted twice).
func Hedged[T any](ctx context.Context, p *Pool, fn func(context.Context, *clientv3.Client) (T, error), discard func(T)) (T, error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	order := p.order()
	results := make(chan result[T], len(order))
	launched, pending := 0, 0
	launch := func() {
		m := order[launched]
		launched++
		pending++
		go func() { results <- call(hctx, p, m, fn) }()
	}
	launch()
	timer := time.NewTimer(p.hedgeAfter)
	defer timer.Stop()
	var errs []error
	for pending > 0 {
		select {
		case <-timer.C:
			if launched < len(order) {
				launch()
				timer.Reset(p.hedgeAfter)
			}
		case r := <-results:
			pending--
			if r.err == nil {
				p.preferMember(r.m)
				if discard != nil && pending > 0 {
					go drain(results, pending, discard)
				}
				return r.v, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", r.m.endpoint, r.err))
			if launched < len(order) && ctx.Err() == nil {
				launch()
				timer.Reset(p.hedgeAfter)
			}
		}
	}
	var zero T
	return zero, errors.Join(errs...)
}

func drain[T any](results <-chan result[T], n int, discard func(T)) {
	for range n {
		if r := <-results; r.err == nil {
			discard(r.v)
		}
	}
}

// Serial sends fn to one member at a time, starting with the one that
// answered last, and moves on only when the member proved it did not act
// on the request (it has no leader, or belongs to another cluster). For
// writes whose duplicate could land after a later write.
func Serial[T any](ctx context.Context, p *Pool, fn func(context.Context, *clientv3.Client) (T, error)) (T, error) {
	var errs []error
	for _, m := range p.order() {
		r := call(ctx, p, m, fn)
		if r.err == nil {
			p.preferMember(m)
			return r.v, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.endpoint, r.err))
		if !notApplied(r.err) || ctx.Err() != nil {
			break
		}
	}
	var zero T
	return zero, errors.Join(errs...)
}

// notApplied: the member refused the request before proposing it.
func notApplied(err error) bool {
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, ErrForeignCluster)
}

// KeepAliveOnce renews lease through every member at once and returns the
// first success (see docs/architecture.md). "Lease not found" is final only
// from a member verified to be of our cluster: members forward renewals to
// the etcd leader, so it is then the leader's answer.
func (p *Pool) KeepAliveOnce(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	ttl, _, err := p.KeepAliveOnceFrom(ctx, lease)
	return ttl, err
}

// KeepAliveOnceFrom is KeepAliveOnce that also names the endpoint whose
// answer counted (the first success, or the verified "lease not found"),
// for the per-endpoint renewal latency; "" when every member failed.
func (p *Pool) KeepAliveOnceFrom(ctx context.Context, lease clientv3.LeaseID) (time.Duration, string, error) {
	results := make(chan result[*clientv3.LeaseKeepAliveResponse], len(p.members))
	for _, m := range p.members {
		go func() {
			results <- call(ctx, p, m, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseKeepAliveResponse, error) {
				return c.KeepAliveOnce(ctx, lease)
			})
		}()
	}
	var errs []error
	for range p.members {
		r := <-results
		switch {
		case r.err == nil:
			p.preferMember(r.m)
			return time.Duration(r.v.TTL) * time.Second, r.m.endpoint, nil
		case errors.Is(r.err, rpctypes.ErrLeaseNotFound) && p.verified(r.m):
			return 0, r.m.endpoint, r.err
		case errors.Is(r.err, rpctypes.ErrLeaseNotFound):
			// Not wrapped: from an unverified member it is no verdict.
			errs = append(errs, fmt.Errorf("%s: lease not found, but this endpoint is not verified to be of our etcd cluster", r.m.endpoint))
			p.rechecks.Go(func() { p.recheck(r.m) })
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.m.endpoint, r.err))
	}
	return 0, "", errors.Join(errs...)
}

// Wait returns once no background status check runs (each is bounded by
// 1 s). Tests call it before they stop the etcd servers: an embedded etcd
// stopped under a Status request in flight can panic (seen in CI, etcd
// v3.7.3: a nil bbolt transaction in Status' storage-version read).
func (p *Pool) Wait() { p.rechecks.Wait() }

// recheck learns an unverified member's cluster ID from its status.
func (p *Pool) recheck(m *poolMember) {
	if m.endpoint == "balanced" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if resp, err := m.cli.Status(ctx, m.endpoint); err == nil && resp.Header != nil {
		_ = p.admit(m, resp.Header.ClusterId)
	}
}

// Grant creates a lease, hedged; a lease granted twice is revoked.
func (p *Pool) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	return Hedged(ctx, p, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseGrantResponse, error) {
		return c.Grant(ctx, ttl)
	}, func(extra *clientv3.LeaseGrantResponse) {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Revoke(rctx, extra.ID)
	})
}

// Revoke revokes a lease (idempotent, so hedged).
func (p *Pool) Revoke(ctx context.Context, lease clientv3.LeaseID) error {
	_, err := Hedged(ctx, p, func(ctx context.Context, c *clientv3.Client) (*clientv3.LeaseRevokeResponse, error) {
		return c.Revoke(ctx, lease)
	}, nil)
	return err
}

// Watch watches through the member that answered last, with the leader
// requirement, so a member that loses its leader ends the watch (the
// caller re-reads and watches again, then through another member).
func (p *Pool) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	m := p.order()[0]
	return m.cli.Watch(clientv3.WithRequireLeader(ctx), key, opts...)
}

// KV is the part of clientv3.KV the pool offers; *clientv3.Client has it.
type KV interface {
	Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error)
	Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error)
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error)
	Txn(ctx context.Context) clientv3.Txn
}

// Hedged is a KV whose requests are hedged (see Hedged): for
// reads and for transactions that cannot take effect twice.
func (p *Pool) Hedged() KV { return poolKV{p: p, hedged: true} }

// Serial is a KV whose requests go to one member at a time (see
// Serial): for writes that must not be duplicated.
func (p *Pool) Serial() KV { return poolKV{p: p} }

type poolKV struct {
	p      *Pool
	hedged bool
}

func (k poolKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	fn := func(ctx context.Context, c *clientv3.Client) (clientv3.OpResponse, error) { return c.Do(ctx, op) }
	if k.hedged {
		return Hedged(ctx, k.p, fn, nil)
	}
	return Serial(ctx, k.p, fn)
}

func (k poolKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	r, err := k.Do(ctx, clientv3.OpPut(key, val, opts...))
	return r.Put(), err
}

func (k poolKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	r, err := k.Do(ctx, clientv3.OpGet(key, opts...))
	return r.Get(), err
}

func (k poolKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	r, err := k.Do(ctx, clientv3.OpDelete(key, opts...))
	return r.Del(), err
}

func (k poolKV) Txn(ctx context.Context) clientv3.Txn { return &poolTxn{kv: k, ctx: ctx} }

// poolTxn collects a transaction and sends it through the pool on Commit.
type poolTxn struct {
	kv         poolKV
	ctx        context.Context
	cmps       []clientv3.Cmp
	thens, els []clientv3.Op
}

func (t *poolTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.cmps = append(t.cmps, cs...); return t }
func (t *poolTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)
	return t
}
func (t *poolTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.els = append(t.els, ops...); return t }

func (t *poolTxn) Commit() (*clientv3.TxnResponse, error) {
	fn := func(ctx context.Context, c *clientv3.Client) (*clientv3.TxnResponse, error) {
		return c.Txn(ctx).If(t.cmps...).Then(t.thens...).Else(t.els...).Commit()
	}
	if t.kv.hedged {
		return Hedged(t.ctx, t.kv.p, fn, nil)
	}
	return Serial(t.ctx, t.kv.p, fn)
}
