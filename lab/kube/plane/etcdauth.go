package plane

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// APIServerRole is the etcd role that lets the plane's kube-apiservers read
// and write their keys once the plane's etcd has auth on (EnsureEtcdAuth).
const APIServerRole = "kube-apiserver"

// apiserverEtcdUser is master m's kube-apiserver's etcd user: its
// --etcd-certfile's CN. One per master, so that the fence at etcd can cut
// one off (etcd_fence).
func apiserverEtcdUser(m string) string { return "kube-apiserver-" + m }

// etcdFenceEdit sets [etcd_fence] for every master: the role and each
// master's apiserver user.
func etcdFenceEdit(node string, c *config.Config) {
	c.EtcdFence.Role = APIServerRole
	c.EtcdFence.Users = nil
	for _, m := range lab.MasterNames {
		c.EtcdFence.Users = append(c.EtcdFence.Users, m+"="+apiserverEtcdUser(m))
	}
}

// EnsureEtcdAuth turns etcd's auth on for the plane, once (later calls find
// it on): every identity the lab uses holds the root role (the lab's own
// client, the supervisors, which need it to revoke and grant roles), and
// each master's apiserver user holds APIServerRole, read-write below the
// plane's prefix and on the apiservers' compaction key. Authentication
// stays the client certificate (etcd --client-cert-auth: CN = user).
// kube-apiserver's Compact call needs root and fails from then on (logged
// by the apiservers, harmless over a lab's life).
func (p *Plane) EnsureEtcdAuth(ctx context.Context) error {
	cli, err := p.Lab.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("plane: etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	roots := append([]string{"root", "lab"}, lab.MasterNames...)
	var steps []func() error
	for _, u := range roots {
		steps = append(steps, addUser(ctx, cli, u, "root"))
	}
	steps = append(steps, ignore(rpctypes.ErrRoleAlreadyExist, func() error { _, err := cli.RoleAdd(ctx, APIServerRole); return err }))
	for _, k := range [][2]string{{EtcdPrefix + "/", clientv3.GetPrefixRangeEnd(EtcdPrefix + "/")}, {"compact_rev_key", ""}} {
		steps = append(steps, func() error {
			_, err := cli.RoleGrantPermission(ctx, APIServerRole, k[0], k[1], clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		})
	}
	for _, m := range lab.MasterNames {
		steps = append(steps, addUser(ctx, cli, apiserverEtcdUser(m), APIServerRole))
	}
	steps = append(steps, func() error { _, err := cli.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("plane: enable etcd auth, step %d: %w", i+1, err)
		}
	}
	p.Log.Info("plane: etcd auth enabled", "apiserver_role", APIServerRole)
	return nil
}

// addUser adds user (certificate authentication only, no password) and
// grants it role; either already done is fine.
func addUser(ctx context.Context, cli *clientv3.Client, user, role string) func() error {
	return func() error {
		_, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true})
		if err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return err
		}
		_, err = cli.UserGrantRole(ctx, user, role)
		return err
	}
}

func ignore(want error, f func() error) func() error {
	return func() error {
		if err := f(); err != nil && !errors.Is(err, want) {
			return err
		}
		return nil
	}
}
