package etcd

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

// The test binary doubles as `kha-lab etcd-member`, so members run as real
// separate processes without building the command first.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "etcd-member" {
		os.Exit(MemberMain(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

func newCluster(t testing.TB) *Cluster {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "sysctl")
	ctx := context.Background()
	tp := topo.Default(fmt.Sprintf("kl3e%04x", os.Getpid()&0xffff))
	if err := topo.CleanupStale(ctx, tp.Prefix); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		Topo:    tp,
		Members: []string{"e1", "e2", "e3"},
		Command: []string{self, "etcd-member"},
		CA:      ca,
		RunDir:  filepath.Join(dir, "run"),
		DataDir: filepath.Join(dir, "data"),
		LogDir:  filepath.Join(dir, "log"),
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := c.Down(ctx); err != nil {
			t.Errorf("etcd down: %v", err)
		}
		if err := tp.Down(ctx); err != nil {
			t.Errorf("topo down: %v", err)
		}
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(c.LogFile(m))
				t.Logf("log of %s:\n%s", m, b)
			}
		}
	})
	if err := tp.Up(ctx); err != nil {
		t.Fatal(err)
	}
	uctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Up(uctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func put(c *Cluster, key string) error {
	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, key, "v")
	return err
}

func TestMembersQuorumAndAuth(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	if err := put(c, "/a"); err != nil {
		t.Fatalf("put on a healthy cluster: %v", err)
	}

	// One member down: the other two keep quorum.
	if err := c.Kill(ctx, "e1"); err != nil {
		t.Fatal(err)
	}
	if c.Running("e1") {
		t.Fatalf("e1 still running after Kill")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.WaitHealthy(wctx, "e2", "e3"); err != nil {
		t.Fatal(err)
	}
	if err := put(c, "/b"); err != nil {
		t.Fatalf("put with one member down: %v", err)
	}

	// Two down: no quorum, writes fail.
	if err := c.Stop(ctx, "e2"); err != nil {
		t.Fatal(err)
	}
	if err := put(c, "/c"); err == nil {
		t.Fatalf("put succeeded without quorum")
	}

	// Restart both from their data: the cluster heals with its data.
	for _, m := range []string{"e1", "e2"} {
		if err := c.Start(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(wctx, c.Members...); err != nil {
		t.Fatal(err)
	}
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	gctx, gcancel := context.WithTimeout(ctx, 3*time.Second)
	defer gcancel()
	resp, err := cli.Get(gctx, "/b")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get /b after restart = %v, %v", resp, err)
	}

	// Leadership moves where a scenario asks (the stacked layout's
	// scenarios 72 and 73), whichever member leads now.
	for _, to := range []string{"e2", "e3", "e3"} {
		if err := c.MoveLeader(wctx, to); err != nil {
			t.Fatalf("move the leader to %s: %v", to, err)
		}
		if got, _ := c.Leader(ctx); got != to {
			t.Fatalf("after MoveLeader(%s) %q leads", to, got)
		}
	}
	if err := c.MoveLeader(wctx, "e9"); err == nil || !strings.Contains(err.Error(), "e9") {
		t.Fatalf("move the leader to a member that does not exist: err = %v, want one naming it", err)
	}

	// Without a client certificate the members refuse the connection.
	tlsNoCert := &tls.Config{RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, "obs", "tcp", addr)
	}
	anon, err := clientv3.New(clientv3.Config{
		Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, TLS: tlsNoCert,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)}, Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	actx, acancel := context.WithTimeout(ctx, 3*time.Second)
	defer acancel()
	if _, err := anon.Get(actx, "/b"); err == nil {
		t.Fatalf("a client without certificate was served")
	}
}
