package etcdconn_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

const (
	user     = "kha"
	password = "s3cret pass"
	prefix   = "/kha-supervisor/"
)

// authCluster is a 3-member TLS cluster with client-certificate auth, and
// etcd auth enabled: user root (needed to enable auth) and user kha with
// read-write access below /kha-supervisor/ only.
type authCluster struct {
	c      *etcdtest.Cluster
	ca     *pki.CA
	cert   pki.Pair // CN=kha
	pwFile string   // holds password plus a trailing newline
}

func newAuthCluster(t *testing.T) *authCluster {
	t.Helper()
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3, TLS: ca})
	root := c.Client(t) // client certificate CN=root: acts as root once auth is on
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, user); return err },
		func() error {
			_, err := root.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := root.UserAdd(ctx, user, password); return err },
		func() error { _, err := root.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := root.AuthEnable(ctx); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth setup step %d: %v", i, err)
		}
	}
	cert, err := ca.Client(user)
	if err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(t.TempDir(), "etcd-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &authCluster{c: c, ca: ca, cert: cert, pwFile: pwFile}
}

func (a *authCluster) config() config.Etcd {
	e := config.Default().Etcd
	e.Endpoints = a.c.Endpoints()
	e.CA = a.ca.CertFile
	e.Cert = a.cert.CertFile
	e.Key = a.cert.KeyFile
	e.Username = user
	e.PasswordFile = a.pwFile
	e.DialTimeout = 3 * time.Second
	return e
}

func dial(t *testing.T, cfg config.Etcd) (*clientv3.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cli, err := etcdconn.Dial(ctx, cfg)
	if err == nil {
		t.Cleanup(func() { _ = cli.Close() })
	}
	return cli, err
}

// mentionsEndpoint reports whether err names one of the endpoints.
func mentionsEndpoint(err error, eps []string) bool {
	for _, ep := range eps {
		if strings.Contains(err.Error(), ep) {
			return true
		}
	}
	return false
}

func TestDialWithAuth(t *testing.T) {
	a := newAuthCluster(t)

	t.Run("password and certificate", func(t *testing.T) {
		cli, err := dial(t, a.config())
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, prefix+"k", "v"); err != nil {
			t.Fatalf("put below the granted prefix: %v", err)
		}
		resp, err := cli.Get(ctx, prefix+"k")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("get = %v, want v", resp.Kvs)
		}
		// Auth is really on and this client is user kha, not root.
		if _, err := cli.Put(ctx, "/elsewhere", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Fatalf("put outside the granted prefix: %v; want permission denied", err)
		}
		v, err := etcdconn.ServerVersion(ctx, cli)
		if err != nil {
			t.Fatalf("ServerVersion: %v", err)
		}
		if !etcdconn.LeaseSafeVersion(v) {
			t.Errorf("embedded etcd reports version %q, which LeaseSafeVersion rejects", v)
		}
		t.Logf("server version %s", v)
	})

	t.Run("one renewal client per endpoint", func(t *testing.T) {
		clients := etcdconn.PerEndpoint(a.config(), slog.Default())
		t.Cleanup(func() {
			for _, c := range clients {
				c.Close()
			}
		})
		if len(clients) != len(a.config().Endpoints) {
			t.Fatalf("%d clients for %d endpoints", len(clients), len(a.config().Endpoints))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lease, err := clients[0].Grant(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range clients {
			if eps := c.Endpoints(); len(eps) != 1 || eps[0] != a.config().Endpoints[i] {
				t.Fatalf("client %d has endpoints %v", i, eps)
			}
			// Each one renews through its own member, as user kha.
			if _, err := c.KeepAliveOnce(ctx, lease.ID); err != nil {
				t.Fatalf("renew through %s: %v", c.Endpoints()[0], err)
			}
		}
	})

	t.Run("certificate only", func(t *testing.T) {
		cfg := a.config()
		cfg.Username, cfg.PasswordFile = "", ""
		cli, err := dial(t, cfg)
		if err != nil {
			t.Fatalf("Dial with the client certificate alone: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, prefix+"cert", "v"); err != nil {
			t.Fatalf("put as the certificate's user: %v", err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		cfg := a.config()
		cfg.PasswordFile = filepath.Join(t.TempDir(), "wrong")
		if err := os.WriteFile(cfg.PasswordFile, []byte("not it\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := dial(t, cfg)
		if err == nil {
			t.Fatal("Dial with a wrong password succeeded")
		}
		t.Logf("wrong password: %v", err)
		if !errors.Is(err, rpctypes.ErrAuthFailed) || !mentionsEndpoint(err, cfg.Endpoints) || !strings.Contains(err.Error(), user) {
			t.Errorf("error %q should be an authentication failure naming the endpoints and the user", err)
		}
	})

	t.Run("missing client certificate", func(t *testing.T) {
		cfg := a.config()
		cfg.Cert, cfg.Key = "", ""
		_, err := dial(t, cfg)
		if err == nil {
			t.Fatal("Dial without a client certificate succeeded")
		}
		t.Logf("missing client certificate: %v", err)
		if !mentionsEndpoint(err, cfg.Endpoints) || !strings.Contains(err.Error(), "rejected this client's TLS identity") {
			t.Errorf("error %q should name the endpoints and say the server rejected the client", err)
		}
	})

	t.Run("certificate from another CA", func(t *testing.T) {
		other, err := pki.NewCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		rogue, err := other.Client(user)
		if err != nil {
			t.Fatal(err)
		}
		cfg := a.config()
		cfg.Cert, cfg.Key = rogue.CertFile, rogue.KeyFile
		cfg.Username, cfg.PasswordFile = "", ""
		_, err = dial(t, cfg)
		if err == nil {
			t.Fatal("Dial with a certificate from an unrelated CA succeeded")
		}
		t.Logf("foreign certificate: %v", err)
		if !mentionsEndpoint(err, cfg.Endpoints) || !strings.Contains(err.Error(), "rejected this client's TLS identity") {
			t.Errorf("error %q should name the endpoints and say the server rejected the client", err)
		}
	})

	t.Run("server not trusted", func(t *testing.T) {
		other, err := pki.NewCA(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cfg := a.config()
		cfg.CA = other.CertFile
		_, err = dial(t, cfg)
		if err == nil {
			t.Fatal("Dial trusting an unrelated CA succeeded")
		}
		t.Logf("untrusted server: %v", err)
		if !mentionsEndpoint(err, cfg.Endpoints) || !strings.Contains(err.Error(), "TLS handshake failed") {
			t.Errorf("error %q should name the endpoints and the failed handshake", err)
		}
	})

	t.Run("one member down", func(t *testing.T) {
		a.c.Member(2).Stop()
		defer func() {
			if err := a.c.Member(2).Restart(); err != nil {
				t.Fatal(err)
			}
		}()
		cli, err := dial(t, a.config())
		if err != nil {
			t.Fatalf("Dial with one of three members down: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, prefix+"k2", "v"); err != nil {
			t.Fatalf("put with one member down: %v", err)
		}
	})
}

// TestPasswordAuthenticatesEveryRenewal pins the etcd client behaviour
// behind the warning on etcd.username (config.Warnings) and the advice in
// docs/install.md: with a user name and password, etcd's Go client (v3.7)
// asks the server for a new token before every streamed request (the
// stream interceptor in retry_interceptor.go calls getToken, which sends
// Authenticate: a bcrypt check and a raft entry on the etcd side), and a
// lease renewal is a stream (LeaseKeepAlive). etcd's default "simple"
// tokens are valid only on the member that issued them, so through a
// client balanced over several members a renewal may even be refused
// with "invalid auth token". With the certificate's common name as the
// user no Authenticate is sent and every renewal succeeds. If a newer
// client stops re-authenticating, this test fails and the warning can go.
func TestPasswordAuthenticatesEveryRenewal(t *testing.T) {
	a := newAuthCluster(t)
	const renewals = 10
	for _, tc := range []struct {
		name     string
		password bool
	}{{"password", true}, {"certificate common name", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := a.config()
			if !tc.password {
				cfg.Username, cfg.PasswordFile = "", ""
			}
			cc, err := etcdconn.ClientConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var auths atomic.Int64
			cc.DialOptions = append(cc.DialOptions, grpc.WithChainUnaryInterceptor(
				func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
					if strings.HasSuffix(method, "/Authenticate") {
						auths.Add(1)
					}
					return invoker(ctx, method, req, reply, conn, opts...)
				}))
			cli, err := clientv3.New(cc)
			if err != nil {
				t.Fatalf("new client: %v", err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := cli.Grant(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			before := auths.Load()
			var took []time.Duration
			var failed []error
			for range renewals {
				start := time.Now()
				if _, err := cli.KeepAliveOnce(ctx, l.ID); err != nil {
					failed = append(failed, err)
					continue
				}
				took = append(took, time.Since(start))
			}
			calls := auths.Load() - before
			slices.Sort(took)
			t.Logf("%d renewals: %d Authenticate requests, %d refused %v; renewal times %v", renewals, calls, len(failed), failed, took)
			switch {
			case tc.password && calls < renewals:
				t.Errorf("%d Authenticate requests for %d renewals with a password, want one per renewal: the client no longer re-authenticates per stream; revisit the etcd.username warning", calls, renewals)
			case !tc.password && (calls != 0 || len(failed) > 0):
				t.Errorf("certificate common name: %d Authenticate requests (want none), %d renewals refused (want none): %v", calls, len(failed), failed)
			}
		})
	}
}
