package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// grantCheckEvery is how often a standby makes sure again that its own
// kube-apiserver holds the role and that its writer mark is gone
// (etcd_fence): a promotion elsewhere that raced with this node's start-up
// may have revoked it.
const grantCheckEvery = 10 * time.Second

// etcdFence is the fence at etcd itself (etcd_fence, docs/architecture.md
// "The old term's writes in etcd", item 5). Nil when the section is off.
//
// Why at etcd: a master paused together with its kube-apiserver sends, when
// it resumes, the requests its apiserver had admitted before the pause, and
// its supervisor resumes at the same instant: nothing on the node can stop
// them (scenario 65). etcd checks a request's permission when it applies
// it, against the auth store as it is then, and fails every request
// proposed under an older auth revision (ErrAuthOldRevision), so once a
// revoke of that apiserver's role has committed, none of its writes
// commits while the role stays revoked.
//
// Who is revoked is kept in etcd, not in one promotion's memory: before a
// node's units may run it puts its writer mark (Keys.Writer, no lease), and
// only that node deletes it, once its units are confirmed down (a demotion
// before it gives the key back; a standby, later). Every promotion revokes
// the role of every other master with a mark whose record does not say its
// units are stopped, so a holder that was never revoked (its successor's
// promotion failed before it could) is revoked by the next one.
type etcdFence struct {
	pool    *etcdconn.Pool
	keys    group.Keys
	role    string
	users   map[string]string // node -> its kube-apiserver's etcd user
	self    string
	timeout time.Duration // per request (opTimeout)
	log     *slog.Logger

	// mu orders clearOwn against a promotion's start: mayWrite is set
	// before the promotion revokes or puts anything and cleared only once
	// this node's units are confirmed down (unitsDown), so that a clearOwn
	// of the standby that is campaigning can never delete the mark the
	// promotion is about to put.
	mu       sync.Mutex
	mayWrite bool
}

func newEtcdFence(c config.Config, pool *etcdconn.Pool, keys group.Keys, log *slog.Logger) (*etcdFence, error) {
	if !c.EtcdFence.Enabled() {
		return nil, nil
	}
	users, err := c.EtcdFence.UserMap()
	if err != nil {
		return nil, fmt.Errorf("etcd_fence.users: %w", err)
	}
	return &etcdFence{pool: pool, keys: keys, role: c.EtcdFence.Role, users: users, self: c.Node, timeout: opTimeoutOf(c), log: log}, nil
}

// atPromotion runs in the promotion after the barrier and before anything
// starts: it revokes the role of the masters revokeTargets names, grants it
// to this node's own apiserver (revoked earlier, and never granted back if
// the leader that revoked it died first), and puts this node's writer mark,
// only while it holds the key with token.
func (f *etcdFence) atPromotion(ctx context.Context, leaderKey string, token int64) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	f.mayWrite = true
	f.mu.Unlock()
	marks, recs, err := f.look(ctx)
	if err != nil {
		return err
	}
	for _, node := range revokeTargets(f.self, marks, recs) {
		if err := f.revoke(ctx, node); err != nil {
			return err
		}
	}
	if err := f.grantOwn(ctx); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	resp, err := etcdconn.Serial(rctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.TxnResponse, error) {
		return c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(leaderKey), "=", token)).
			Then(clientv3.OpPut(f.keys.Writer(f.self), fmt.Sprint(token))).Commit()
	})
	switch {
	case err != nil:
		return fmt.Errorf("fence at etcd: put this node's writer mark: %w", err)
	case !resp.Succeeded:
		return fmt.Errorf("fence at etcd: put this node's writer mark: the election key is no longer ours (token %d)", token)
	}
	return nil
}

// unitsDown says this node's units are confirmed down (a demotion, before
// it gives the key back) and clears as clearOwn does.
func (f *etcdFence) unitsDown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	f.mayWrite = false
	f.mu.Unlock()
	return f.clearOwn(ctx)
}

// look reads the writer marks and the member records in one revision.
func (f *etcdFence) look(ctx context.Context) (marks []string, recs map[string]group.Record, err error) {
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	resp, err := f.pool.Hedged().Txn(rctx).Then(
		clientv3.OpGet(f.keys.Writers(), clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(f.keys.Members(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("fence at etcd: read writer marks and member records: %w", err)
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		marks = append(marks, strings.TrimPrefix(string(kv.Key), f.keys.Writers()))
	}
	recs, _ = group.DecodeMembers(f.keys, resp.Responses[1].GetResponseRange().Kvs)
	return marks, recs, nil
}

// revokeTargets are the other masters whose apiservers may still carry
// writes of a term: those with a writer mark, minus those whose member
// record says their units are stopped (a record is written before the first
// start and after the last unit is confirmed down, so a master that says so
// has no component of a term left; one that was cut off, paused or killed
// has no record any more, or one saying its units may run).
func revokeTargets(self string, marks []string, recs map[string]group.Record) []string {
	var out []string
	for _, node := range marks {
		if r, ok := recs[node]; node == self || (ok && !r.UnitsRunning) {
			continue
		}
		out = append(out, node)
	}
	slices.Sort(out)
	return out
}

// revoke takes the role from node's apiserver, through one member at a
// time (Serial: on to the next only when a member refused the request
// unproposed), once: a timed-out revoke may still land, and a second
// copy could land after that node granted it back. Already revoked is
// done; a missing user is not (etcd says so as well when this
// supervisor's own identity is no etcd user).
func (f *etcdFence) revoke(ctx context.Context, node string) error {
	user, ok := f.users[node]
	if !ok {
		f.log.Warn("cannot fence a master at etcd: it is not in etcd_fence.users", "master", node)
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	_, err := etcdconn.Serial(rctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserRevokeRoleResponse, error) {
		return c.UserRevokeRole(ctx, user, f.role)
	})
	switch {
	case err == nil:
		f.log.Warn("fenced the kube-apiserver of a master that may still write at etcd", "master", node, "user", user, "role", f.role)
		return nil
	case errors.Is(err, rpctypes.ErrRoleNotGranted):
		return nil
	}
	return fmt.Errorf("fence at etcd: revoke role %s from %s (the kube-apiserver of %s): %w", f.role, user, node, err)
}

// grantOwn gives the role to this node's apiserver; etcd ignores a grant
// the user already has. One member at a time (Serial): a copy held up in a
// partition must not land after a later revoke.
func (f *etcdFence) grantOwn(ctx context.Context) error {
	user := f.users[f.self]
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if _, err := etcdconn.Serial(rctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserGrantRoleResponse, error) {
		return c.UserGrantRole(ctx, user, f.role)
	}); err != nil {
		return fmt.Errorf("fence at etcd: grant role %s to %s (this node's kube-apiserver): %w", f.role, user, err)
	}
	return nil
}

// clearOwn, with this node's units confirmed down, gives its apiserver the
// role back if it lacks it and deletes its writer mark if there is one:
// reads every time, writes only when needed; the delete only of the mark
// it read (a copy landing late cannot take a later term's mark). Nothing
// while a promotion of this node may write (mayWrite).
func (f *etcdFence) clearOwn(ctx context.Context) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mayWrite {
		return nil
	}
	if err := f.ensureOwn(ctx, "granted this node's kube-apiserver its etcd role back (units down)"); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	mark := f.keys.Writer(f.self)
	got, err := f.pool.Hedged().Get(rctx, mark)
	if err != nil {
		return fmt.Errorf("read this node's writer mark: %w", err)
	}
	if len(got.Kvs) == 0 {
		return nil
	}
	rev := got.Kvs[0].ModRevision
	if _, err := etcdconn.Serial(rctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.TxnResponse, error) {
		return c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(mark), "=", rev)).Then(clientv3.OpDelete(mark)).Commit()
	}); err != nil {
		return fmt.Errorf("delete this node's writer mark: %w", err)
	}
	return nil
}

// ensureOwn grants this node's apiserver the role if a read shows it
// lacks it, and logs why with msg.
func (f *etcdFence) ensureOwn(ctx context.Context, msg string) error {
	user := f.users[f.self]
	rctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	u, err := etcdconn.Hedged(rctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserGetResponse, error) {
		return c.UserGet(ctx, user)
	}, nil)
	if err != nil {
		return fmt.Errorf("read etcd user %s: %w", user, err)
	}
	if slices.Contains(u.Roles, f.role) {
		return nil
	}
	if err := f.grantOwn(ctx); err != nil {
		return err
	}
	f.log.Info(msg, "user", user, "role", f.role)
	return nil
}

// keepClear runs clearOwn whenever the node is a standby with its units
// confirmed down (down reports it): on entering that state (at the next
// tick, every `every`), then every grantCheckEvery. Never while the
// published state is anything else: a master resuming from a pause still
// shows its old term until its loop has fenced, and its apiserver must stay
// fenced until then. While the node's term may act (acting), it makes sure
// every grantCheckEvery that its own apiserver still holds the role: a
// revoke sent by an earlier promotion elsewhere may land late.
func (f *etcdFence) keepClear(ctx context.Context, every time.Duration, down, acting func() bool) {
	if f == nil {
		return
	}
	var last time.Time
	was := ""
	for sleep(ctx, every) == nil {
		now := ""
		switch {
		case down():
			now = "down"
		case acting():
			now = "acting"
		}
		if now == "" || (now == was && time.Since(last) < grantCheckEvery) {
			was = now
			continue
		}
		was, last = now, time.Now()
		var err error
		if now == "down" {
			err = f.clearOwn(ctx)
		} else {
			err = f.ensureOwn(ctx, "this node's kube-apiserver had lost its etcd role while this node leads; granted it back")
		}
		if err != nil {
			f.log.Warn("cannot grant this node's kube-apiserver its etcd role back", "err", err)
			was = "" // try again next tick
		}
	}
}
