package etcdconn_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

func plainConfig(eps ...string) config.Etcd {
	e := config.Default().Etcd
	e.Endpoints = eps
	e.DialTimeout = 2 * time.Second
	e.RequestTimeout = time.Second
	return e
}

func single(t *testing.T, ep string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// Endpoints of two etcd clusters in one configuration make two groups
// and let the other cluster's "lease not found" fence a healthy holder:
// Dial refuses them, naming each cluster's endpoints.
func TestDialRefusesEndpointsOfTwoClusters(t *testing.T) {
	ours := etcdtest.NewCluster(t, etcdtest.Options{Members: 2})
	other := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	eps := append(ours.Endpoints(), other.Endpoints()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := etcdconn.Dial(ctx, plainConfig(eps...))
	if err == nil {
		_ = cli.Close()
		t.Fatalf("Dial accepted endpoints of two etcd clusters %v", eps)
	}
	if !errors.Is(err, etcdconn.ErrForeignCluster) || !strings.Contains(err.Error(), other.Endpoints()[0]) ||
		!strings.Contains(err.Error(), fmt.Sprintf("%x", other.Member(0).ClusterID())) {
		t.Fatalf("Dial error %q: want ErrForeignCluster naming %s and its cluster ID", err, other.Endpoints()[0])
	}
	t.Logf("refused: %v", err)
}

// TestEndpointOfAnotherClusterIsNeverAProof: a pool verified against our
// cluster that also holds a client of another cluster (an endpoint that
// was down at start-up, or was replaced since) never takes that member's
// answers: its "lease not found" is no verdict, its grants never count.
func TestEndpointOfAnotherClusterIsNeverAProof(t *testing.T) {
	ours := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	other := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	mine, foreign := single(t, ours.Endpoints()[0]), single(t, other.Endpoints()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var pools []*etcdconn.Pool
	// Before the clusters stop (cleanups run last-registered first).
	t.Cleanup(func() {
		for _, p := range pools {
			p.Wait()
		}
	})

	if _, err := etcdconn.NewPool([]*clientv3.Client{mine, foreign}, etcdconn.PoolOptions{}); err != nil {
		t.Fatal(err)
	}
	mixed, _ := etcdconn.NewPool([]*clientv3.Client{mine, foreign}, etcdconn.PoolOptions{})
	if err := mixed.Verify(ctx); !errors.Is(err, etcdconn.ErrForeignCluster) {
		t.Fatalf("Verify of a pool over two clusters: %v, want ErrForeignCluster", err)
	}

	// The foreign member first, answering fastest: it must never count.
	pool, err := etcdconn.NewPool([]*clientv3.Client{foreign, mine}, etcdconn.PoolOptions{
		ClusterID: ours.Member(0).ClusterID(), HedgeAfter: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	pools = append(pools, pool)
	g, err := pool.Grant(ctx, 5)
	if err != nil {
		t.Fatalf("grant through the pool: %v", err)
	}
	if g.ClusterId != ours.Member(0).ClusterID() {
		t.Fatalf("lease granted by cluster %x, want ours %x", g.ClusterId, ours.Member(0).ClusterID())
	}
	for i := range 20 {
		if _, err := pool.KeepAliveOnce(ctx, g.ID); err != nil {
			t.Fatalf("renewal %d: %v (the other cluster's answer counted)", i, err)
		}
	}
	// Without our member, the foreign answer is an error, not a verdict.
	alone, _ := etcdconn.NewPool([]*clientv3.Client{foreign}, etcdconn.PoolOptions{ClusterID: ours.Member(0).ClusterID()})
	pools = append(pools, alone)
	for range 3 {
		_, err = alone.KeepAliveOnce(ctx, g.ID)
		if err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
			t.Fatalf("renewal through another cluster only: %v; want an error that is not lease-not-found", err)
		}
	}
	if _, err := alone.Grant(ctx, 5); !errors.Is(err, etcdconn.ErrForeignCluster) {
		t.Fatalf("grant through another cluster only: %v, want ErrForeignCluster", err)
	}
	// Our own cluster's verdict stays final.
	if _, err := mine.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("renewal of a revoked lease: %v, want lease not found", err)
	}
}
