package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// grantCheckEvery is how often a standby makes sure again that its own
// kube-apiserver holds the role (etcd_fence): a promotion elsewhere that
// raced with this node's start-up may have revoked it.
const grantCheckEvery = 10 * time.Second

// etcdFence is the fence at etcd itself (etcd_fence, docs/architecture.md
// "The fence at etcd"): the promotion revokes the apiserver role of every
// other master that may still carry writes of an earlier term, and each
// node grants it back to its own apiserver once its units are down. Nil
// when the section is off.
//
// Why at etcd: a master paused together with its kube-apiserver sends, when
// it resumes, the requests its apiserver had admitted before the pause, and
// its supervisor resumes at the same instant: nothing on the node can stop
// them (scenario 65). etcd checks a request's permission when it applies
// it, against the auth store as it is then, and fails every request
// proposed under an older auth revision (ErrAuthOldRevision), so once the
// revoke has committed no write of that apiserver commits, whether it was
// sent after the revoke or already in flight.
type etcdFence struct {
	pool    *etcdconn.Pool
	role    string
	users   map[string]string // node -> its kube-apiserver's etcd user
	self    string
	timeout time.Duration // per request (etcd.request_timeout)
	log     *slog.Logger
}

func newEtcdFence(c config.Config, pool *etcdconn.Pool, log *slog.Logger) (*etcdFence, error) {
	if !c.EtcdFence.Enabled() {
		return nil, nil
	}
	users, err := c.EtcdFence.UserMap()
	if err != nil {
		return nil, fmt.Errorf("etcd_fence.users: %w", err)
	}
	return &etcdFence{pool: pool, role: c.EtcdFence.Role, users: users, self: c.Node, timeout: c.Etcd.RequestTimeout, log: log}, nil
}

// atPromotion runs in the promotion after the barrier and before anything
// starts: it revokes the role of the masters revokeTargets names, then
// grants it to this node's own apiserver (revoked earlier, and never
// granted back if the leader that revoked it died first).
func (f *etcdFence) atPromotion(ctx context.Context, recs map[string]group.Record, prev holderMark) error {
	if f == nil {
		return nil
	}
	for _, node := range revokeTargets(f.users, f.self, recs, prev) {
		if err := f.revoke(ctx, node); err != nil {
			return err
		}
	}
	return f.grantOwn(ctx)
}

// revokeTargets are the masters whose apiservers may still carry writes of
// an earlier term: the previous holder of the key, or every other master
// when this member never saw who held it; minus those whose member record
// (recs, read after the barrier passed) says their units are stopped. A
// record is written before the first start and after the last unit is
// confirmed down, so a master that says so has no component of a term
// left; one that was cut off, paused or killed has no record any more, or
// one saying its units may run. Earlier holders than the previous one were
// revoked by the takeover that followed them, and only their own
// supervisor, fenced, grants them back.
func revokeTargets(users map[string]string, self string, recs map[string]group.Record, prev holderMark) []string {
	var cand []string
	switch {
	case prev.Unknown:
		for node := range users {
			if node != self {
				cand = append(cand, node)
			}
		}
	case prev.known() && prev.Node != self && users[prev.Node] != "":
		cand = []string{prev.Node}
	}
	slices.Sort(cand)
	return slices.DeleteFunc(cand, func(node string) bool {
		r, ok := recs[node]
		return ok && !r.UnitsRunning
	})
}

// revoke takes the role from node's apiserver: one member at a time
// (Serial), so that a duplicate cannot land after that node granted it
// back. Already revoked is done.
func (f *etcdFence) revoke(ctx context.Context, node string) error {
	user := f.users[node]
	_, err := etcdconn.Serial(ctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserRevokeRoleResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return c.UserRevokeRole(rctx, user, f.role)
	})
	if err != nil && !errors.Is(err, rpctypes.ErrRoleNotGranted) {
		return fmt.Errorf("fence at etcd: revoke role %s from %s (the kube-apiserver of %s): %w", f.role, user, node, err)
	}
	f.log.Warn("fenced the kube-apiserver of the previous master at etcd", "master", node, "user", user, "role", f.role)
	return nil
}

// grantOwn gives the role to this node's apiserver; etcd ignores a grant
// the user already has.
func (f *etcdFence) grantOwn(ctx context.Context) error {
	user := f.users[f.self]
	_, err := etcdconn.Hedged(ctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserGrantRoleResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return c.UserGrantRole(rctx, user, f.role)
	}, nil)
	if err != nil {
		return fmt.Errorf("fence at etcd: grant role %s to %s (this node's kube-apiserver): %w", f.role, user, err)
	}
	return nil
}

// keepGranted grants the role back to this node's apiserver whenever the
// node is a standby with its units confirmed down (down reports it): at
// once on entering that state, then every grantCheckEvery. Never while the
// published state is anything else: a master resuming from a pause still
// shows its old term until its loop has fenced, and its apiserver must stay
// fenced until then.
func (f *etcdFence) keepGranted(ctx context.Context, every time.Duration, down func() bool) {
	if f == nil {
		return
	}
	var last time.Time
	wasDown := false
	for sleep(ctx, every) == nil {
		if !down() {
			wasDown = false
			continue
		}
		if wasDown && time.Since(last) < grantCheckEvery {
			continue
		}
		wasDown, last = true, time.Now()
		if err := f.grantBack(ctx); err != nil {
			f.log.Warn("cannot grant this node's kube-apiserver its etcd role back", "err", err)
			wasDown = false // try again next tick
		}
	}
}

// grantBack grants the role to this node's apiserver if it lacks it: a
// read every time, a write only when needed.
func (f *etcdFence) grantBack(ctx context.Context) error {
	user := f.users[f.self]
	u, err := etcdconn.Hedged(ctx, f.pool, func(ctx context.Context, c *clientv3.Client) (*clientv3.AuthUserGetResponse, error) {
		rctx, cancel := context.WithTimeout(ctx, f.timeout)
		defer cancel()
		return c.UserGet(rctx, user)
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
	f.log.Info("granted this node's kube-apiserver its etcd role back (units down, standby)", "user", user, "role", f.role)
	return nil
}
