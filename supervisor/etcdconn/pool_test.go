package etcdconn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
)

func newPool(t *testing.T, eps []string, hedge time.Duration) *etcdconn.Pool {
	t.Helper()
	var clients []*clientv3.Client
	for _, ep := range eps {
		clients = append(clients, single(t, ep))
	}
	p, err := etcdconn.NewPool(clients, etcdconn.PoolOptions{HedgeAfter: hedge})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A silent member (bytes held, as with a blackhole route) first in line:
// hedged requests go on to the next member after HedgeAfter; serial writes
// do not (a copy could land later), and use the member that answered last.
func TestPoolHedgesPastASilentMember(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	eps, proxies := c.ProxiedEndpoints(t)
	p := newPool(t, eps, 50*time.Millisecond)
	warm, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Serial().Put(warm, "/k", "v0"); err != nil { // connects member 0, which answers last
		t.Fatal(err)
	}
	proxies.Proxy(0).Blackhole(true)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := p.Serial().Put(ctx, "/k", "v1")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("serial put through a silent member: %v, want the deadline (never a second copy)", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	start := time.Now()
	resp, err := p.Hedged().Get(ctx, "/k")
	cancel()
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("hedged get past a silent member: %v, %v", resp, err)
	}
	t.Logf("hedged get answered after %s (hedge delay 50ms)", time.Since(start).Round(time.Millisecond))
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = p.Serial().Put(ctx, "/k", "v2")
	cancel()
	if err != nil {
		t.Fatalf("serial put after a hedged answer moved the preference: %v", err)
	}
}

// Silent names exactly the members that do not answer: one behind a
// blackhole (connected before, so its gRPC connection still looks ready),
// not the two that answer, nor an isolated member (it has no leader, but
// it answers, and a reset would not move anyone off it).
func TestPoolSilentNamesTheMembersThatDoNotAnswer(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	eps, proxies := c.ProxiedEndpoints(t)
	p := newPool(t, eps, 50*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Verify(ctx); err != nil { // every member connected
		t.Fatal(err)
	}
	if got := p.Silent(ctx); len(got) != 0 {
		t.Fatalf("Silent with every member answering = %v, want none", got)
	}
	proxies.Proxy(1).Blackhole(true)
	c.Member(2).Isolate()
	defer c.Member(2).Heal()
	pctx, pcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	got := p.Silent(pctx)
	pcancel()
	if len(got) != 1 || got[0] != eps[1] {
		t.Fatalf("Silent = %v, want [%s] (the blackholed member only)", got, eps[1])
	}
}

// A member without a raft leader (isolated) rejects every request at once
// (require-leader), so even a serial write moves on to the next member,
// and grants and renewals never wait for it.
func TestPoolLeavesALeaderlessMember(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	p := newPool(t, c.Endpoints(), time.Hour) // move on only on errors
	warm, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Serial().Put(warm, "/k", "v0"); err != nil {
		t.Fatal(err)
	}
	c.Member(0).Isolate()
	defer c.Member(0).Heal()
	waitUntil(t, "member 0 to lose its leader", func() bool { return !c.Member(0).HasLeader() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := p.Serial().Put(ctx, "/k", "v1"); err != nil {
		t.Fatalf("serial put with a leaderless member first: %v", err)
	}
	g, err := p.Grant(ctx, 5)
	if err != nil {
		t.Fatalf("grant: %v", err)
	}
	if _, err := p.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	t.Logf("put, grant and renewal took %s together", time.Since(start).Round(time.Millisecond))
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The renewal names the member whose answer counted, and the metrics file
// it under that endpoint: with two of three members silent (client side
// only; the cluster keeps its quorum), every renewal is the third's.
func TestKeepAliveNamesTheAnsweringEndpoint(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	eps, proxies := c.ProxiedEndpoints(t)
	p := newPool(t, eps, 50*time.Millisecond)
	reg := prometheus.NewRegistry()
	m, err := httpapi.NewMetrics(reg, httpapi.WithoutRuntime(), httpapi.WithEndpoints(eps...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := p.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	proxies.Proxy(0).Blackhole(true)
	proxies.Proxy(1).Blackhole(true)
	const n = 5
	for i := range n {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		_, ep, err := p.KeepAliveOnceFrom(rctx, g.ID)
		rcancel()
		m.Renewed("election", ep, time.Since(start), err)
		if err != nil || ep != eps[2] {
			t.Fatalf("renewal %d: answered by %q (err %v), want the only live member %s", i, ep, err, eps[2])
		}
	}
	for i, ep := range eps {
		want := uint64(0)
		if i == 2 {
			want = n
		}
		if got := histogramCount(t, m.RenewDuration.WithLabelValues("election", ep)); got != want {
			t.Errorf("kha_renew_duration_seconds_count{lease=election,endpoint=%s} = %d, want %d", ep, got, want)
		}
	}
	// No member answers: no endpoint, and the failure is counted.
	proxies.Proxy(2).Blackhole(true)
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, ep, err := p.KeepAliveOnceFrom(rctx, g.ID)
	rcancel()
	if err == nil || ep != "" {
		t.Fatalf("renewal with every member silent: endpoint %q, err %v; want \"\" and an error", ep, err)
	}
}

func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var d dto.Metric
	if err := o.(prometheus.Metric).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram().GetSampleCount()
}
