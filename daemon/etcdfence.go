package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// checkEtcdFence refuses to start with etcd_fence set when etcd could not
// carry it out: auth off (a revoked role would change nothing), the role or
// a listed user missing, or this supervisor's identity unable to manage
// users (it needs etcd's root role). Better at start-up, with the culprit
// named, than at the first takeover, which would then fail.
//
// A refusal by etcd (auth off, permission denied, a missing role or user)
// wraps errEtcdFenceSetup, a configuration error; a failure to get an
// answer does not (etcd unreachable: the daemon's ordinary failure).
func checkEtcdFence(ctx context.Context, cli *clientv3.Client, cfg config.Config) error {
	f := cfg.EtcdFence
	if !f.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout+cfg.Etcd.RequestTimeout)
	defer cancel()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd_fence: read etcd's auth status: %w", err)
	}
	if !st.Enabled {
		return fmt.Errorf("%w: etcd's auth is not enabled: a revoked role would not stop anyone (etcdctl auth enable)", errEtcdFenceSetup)
	}
	// Listing roles and users needs the root role, as revoking and
	// granting do: one read proves both the identity and the names.
	roles, err := cli.RoleList(ctx)
	if err != nil {
		return fmt.Errorf("etcd_fence: list etcd's roles: %w%s", setupErr(err), rootHint(err))
	}
	if !slices.Contains(roles.Roles, f.Role) {
		return fmt.Errorf("%w: etcd_fence.role %q: no such role in etcd (etcdctl role add %s, then grant-permission its prefix)", errEtcdFenceSetup, f.Role, f.Role)
	}
	known, err := cli.UserList(ctx)
	if err != nil {
		return fmt.Errorf("etcd_fence: list etcd's users: %w%s", setupErr(err), rootHint(err))
	}
	users, err := f.UserMap()
	if err != nil {
		return fmt.Errorf("etcd_fence.users: %w", err)
	}
	for _, node := range slices.Sorted(maps.Keys(users)) {
		// Whether it holds the role does not matter here: a master
		// fenced earlier gets it back from its own supervisor.
		if !slices.Contains(known.Users, users[node]) {
			return fmt.Errorf("%w: etcd_fence.users: %s (the kube-apiserver of %s) is no etcd user", errEtcdFenceSetup, users[node], node)
		}
	}
	return roleHoldsKeys(ctx, cli, f.Role)
}

// roleHoldsKeys refuses a role whose permissions cover no key in this
// etcd: the kube-apiservers then keep their data in another etcd (the
// supervisors have one of their own), and revoking the role here would
// stop none of their writes, a fence in name only. The fence at etcd needs
// the supervisors on the etcd the apiservers use.
func roleHoldsKeys(ctx context.Context, cli *clientv3.Client, role string) error {
	r, err := cli.RoleGet(ctx, role)
	if err != nil {
		return fmt.Errorf("etcd_fence: read etcd role %q: %w%s", role, setupErr(err), rootHint(err))
	}
	var ranges []string
	for _, p := range r.Perm {
		opts := []clientv3.OpOption{clientv3.WithCountOnly()}
		if len(p.RangeEnd) > 0 {
			opts = append(opts, clientv3.WithRange(string(p.RangeEnd)))
		}
		got, err := cli.Get(ctx, string(p.Key), opts...)
		if err != nil {
			return fmt.Errorf("etcd_fence: count the keys etcd role %q grants: %w", role, setupErr(err))
		}
		if got.Count > 0 {
			return nil
		}
		ranges = append(ranges, permRange(string(p.Key), string(p.RangeEnd)))
	}
	grants := "no key"
	if len(ranges) > 0 {
		grants = strings.Join(ranges, ", ")
	}
	return fmt.Errorf("%w: etcd_fence.role %q grants %s, and this etcd holds no key there: the kube-apiservers keep their data in another etcd, "+
		"where a revoke here would stop none of their writes (put kha-supervisor on the apiservers' etcd, or give the role their --etcd-prefix)",
		errEtcdFenceSetup, role, grants)
}

// permRange names the keys an etcd permission covers, as etcdctl role get
// does.
func permRange(key, end string) string {
	switch end {
	case "":
		return fmt.Sprintf("%q", key)
	case clientv3.GetPrefixRangeEnd(key):
		return fmt.Sprintf("prefix %q", key)
	case "\x00":
		return fmt.Sprintf("every key from %q", key)
	}
	return fmt.Sprintf("[%q, %q)", key, end)
}

// errEtcdFenceSetup marks what etcd refused: a configuration error.
var errEtcdFenceSetup = errors.New("etcd cannot fence as configured")

// setupErr marks err as a configuration error when etcd refused the
// request for who asked (permission denied; no user given; a certificate
// or user name that is no etcd user), leaves it otherwise.
func setupErr(err error) error {
	for _, refusal := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrUserNotFound, rpctypes.ErrAuthFailed} {
		if errors.Is(err, refusal) {
			return fmt.Errorf("%w: %w", errEtcdFenceSetup, err)
		}
	}
	return err
}

func rootHint(err error) string {
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		return " (this supervisor's etcd identity needs etcd's root role to revoke and grant roles)"
	}
	return ""
}

// etcdFenceAtStart is checkEtcdFence's verdict as the daemon's exit code.
func etcdFenceAtStart(ctx context.Context, cli *clientv3.Client, cfg config.Config, log *slog.Logger) int {
	err := checkEtcdFence(ctx, cli, cfg)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errEtcdFenceSetup):
		log.Error("cannot fence at etcd as configured; exiting", "err", err, "config", cfg.Path)
		return ExitConfig
	default:
		log.Error("cannot reach etcd; stopping managed units and exiting", "err", err)
		return ExitFailure
	}
}
