package etcdtest_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
)

// Isolate makes a minority of one that clients can still reach: it loses
// its leader and refuses require-leader requests, while the other two keep
// serving; Heal brings it back.
func TestIsolateAndHeal(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := c.Member(lead) // the leader: the hardest case, it must step down
	m.Isolate()
	waitCond(t, "the isolated member to lose its leader", func() bool { return !m.HasLeader() })
	if c.Member(lead).ClusterID() == 0 || c.Member(lead).ClusterID() != c.Member((lead+1)%3).ClusterID() {
		t.Fatal("ClusterID differs between members of one cluster")
	}
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = []string{m.Endpoint()}
	alone := clientFrom(t, cfg)
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = alone.Put(clientv3.WithRequireLeader(rctx), "k", "v")
	rcancel()
	if err == nil {
		t.Fatal("put through the isolated member succeeded")
	}
	t.Logf("put through the isolated member: %v", err)
	cfg.Endpoints = []string{c.Member((lead + 1) % 3).Endpoint()}
	if _, err := clientFrom(t, cfg).Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put through the majority: %v", err)
	}
	m.Heal()
	waitCond(t, "the healed member to find a leader", m.HasLeader)
	if _, err := alone.Put(clientv3.WithRequireLeader(ctx), "k", "v2"); err != nil {
		t.Fatalf("put through the healed member: %v", err)
	}
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
