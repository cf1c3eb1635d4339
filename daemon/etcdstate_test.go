package daemon

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// restrictedEtcd is a TLS etcd with auth on and user kha allowed below
// /kha-supervisor/ only (docs/configuration.md's least-privilege role),
// and the [etcd] section of a node that logs in as kha.
func restrictedEtcd(t *testing.T) config.Etcd {
	t.Helper()
	e, _ := authEtcd(t)
	return e
}

// authEtcd is restrictedEtcd, and the [etcd] section of a node whose
// client certificate names etcd's root user.
func authEtcd(t *testing.T) (kha, root config.Etcd) {
	t.Helper()
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 1, TLS: ca})
	rootCli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	const prefix = "/kha-supervisor/"
	for i, step := range []func() error{
		func() error { _, err := rootCli.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := rootCli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := rootCli.RoleAdd(ctx, "kha"); return err },
		func() error {
			_, err := rootCli.RoleGrantPermission(ctx, "kha", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := rootCli.UserAdd(ctx, "kha", "kha-pw"); return err },
		func() error { _, err := rootCli.UserGrantRole(ctx, "kha", "kha"); return err },
		func() error { _, err := rootCli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("auth set-up step %d: %v", i, err)
		}
	}
	cert, err := ca.Client("kha")
	if err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("kha-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := config.Default().Etcd
	e.Endpoints = c.Endpoints()
	e.CA, e.Cert, e.Key = ca.CertFile, cert.CertFile, cert.KeyFile
	e.Username, e.PasswordFile = "kha", pw
	rootCert, err := ca.Client("root")
	if err != nil {
		t.Fatal(err)
	}
	r := e
	r.Cert, r.Key, r.Username, r.PasswordFile = rootCert.CertFile, rootCert.KeyFile, "", ""
	return e, r
}

// The parameter's etcd record is read with the node's own etcd identity:
// a least-privilege user (read-write below the prefix only) must be able
// to, or every token-mode promotion fails.
func TestEtcdStateReadsWithinThePrefix(t *testing.T) {
	e := restrictedEtcd(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cli, err := etcdconn.Dial(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pool, err := etcdconn.NewPool([]*clientv3.Client{cli}, etcdconn.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := group.NewKeys(e.Prefix, "c").Leader()
	st, err := etcdState(pool.Hedged(), key, e.RequestTimeout)(ctx)
	if err != nil || st.ClusterID == 0 || st.Revision == 0 {
		t.Fatalf("etcd state as a prefix-restricted user: %+v, %v", st, err)
	}
}
