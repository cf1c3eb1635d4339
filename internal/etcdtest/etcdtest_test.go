package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

func TestQuorumLossAndRestore(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	if got := len(c.Endpoints()); got != 3 {
		t.Fatalf("Endpoints() = %d entries, want 3", got)
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v1"); err != nil {
		t.Fatalf("put with full cluster: %v", err)
	}

	// Keep member 0 and stop the two others: one of three is not a quorum.
	c.Member(1).Stop()
	c.Member(2).Stop()
	if c.Member(1).Running() || c.Member(2).Running() {
		t.Fatal("stopped members still report running")
	}
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := cli.Put(short, "k", "v2")
	cancelShort()
	if err == nil {
		t.Fatal("put succeeded with 1 of 3 members running")
	}
	t.Logf("put without quorum: %v", err)
	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Second)
	if i, err := c.WaitLeader(lctx); err == nil {
		t.Errorf("WaitLeader found leader %d without quorum", i)
	}
	lcancel()

	for _, i := range []int{1, 2} {
		if err := c.Member(i).Restart(); err != nil {
			t.Fatalf("restart member %d: %v", i, err)
		}
	}
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Member(lead).IsLeader() {
		t.Errorf("WaitLeader returned %d, which does not consider itself leader", lead)
	}
	if _, err := cli.Put(ctx, "k", "v3"); err != nil {
		t.Fatalf("put after quorum restored: %v", err)
	}
	// The restarted members kept their data: read from one of them only.
	one := c.Client(t)
	one.SetEndpoints(c.Member(2).Endpoint())
	resp, err := one.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get from restarted member: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v3" {
		t.Fatalf("get from restarted member = %v, want v3", resp.Kvs)
	}
}

func TestTLSRequiresClientCertificate(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 1, TLS: ca})
	for _, ep := range c.Endpoints() {
		if ep[:8] != "https://" {
			t.Fatalf("endpoint %s is not https", ep)
		}
	}
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put over TLS with client certificate: %v", err)
	}

	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS.Certificates = nil
	cfg.TLS.GetClientCertificate = nil
	noCert := clientFrom(t, cfg)
	short, cancelShort := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancelShort()
	if _, err := noCert.Get(short, "k"); err == nil {
		t.Fatal("get without client certificate succeeded")
	}
}

func TestKillLeader(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Member(old).Kill()
	lead, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatalf("no new leader after killing member %d: %v", old, err)
	}
	if lead == old {
		t.Fatalf("killed member %d is still reported as leader", old)
	}
	cli := c.Client(t)
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put with two of three members: %v", err)
	}
	if err := c.Member(old).Restart(); err != nil {
		t.Fatal(err)
	}
	one := c.Client(t)
	one.SetEndpoints(c.Member(old).Endpoint())
	// A linearizable read through the restarted member proves it rejoined.
	resp, err := one.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get through the restarted member: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("restarted member returned %v, want v", resp.Kvs)
	}
}

// TestProxiedEndpoints cuts one client off over TLS while another keeps
// working.
func TestProxiedEndpoints(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3, TLS: ca})
	eps, g := c.ProxiedEndpoints(t)
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Endpoints = eps
	cut := clientFrom(t, cfg)
	direct := c.Client(t)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := cut.Put(ctx, "k", "1"); err != nil {
		t.Fatalf("put through the proxies: %v", err)
	}
	g.Blackhole(true)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err = cut.Get(short, "k")
	cancelShort()
	if err == nil {
		t.Fatal("get through blackholed proxies succeeded")
	}
	if _, err := direct.Put(ctx, "k", "2"); err != nil {
		t.Fatalf("a client not behind the proxies was cut off too: %v", err)
	}
	g.Blackhole(false)
	resp, err := cut.Get(ctx, "k")
	if err != nil {
		t.Fatalf("get after the heal: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("get after the heal = %v, want 2", resp.Kvs)
	}
}
