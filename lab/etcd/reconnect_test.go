package etcd

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// TestSupervisorClientBackSoonAfterAHeal cuts a master from every etcd
// member with the lab's blackhole routes long enough for the supervisor's
// connection to be dropped (its TCP_USER_TIMEOUT, gRPC's keepalive timeout
// of 1 s, aborts a connection whose bytes go unacknowledged) and gRPC to
// fail a few redials, heals, and times how long a lease renewal sent at a
// quarter-second cadence, as the fast profile renews, takes to be answered
// after the heal. With gRPC's default reconnection (1 s, then 1.6 times
// longer after each failure) the client slept up to seconds past the heal
// while its lease ran out; the daemon's client (etcdconn.ClientConfig)
// redials every 100 ms at most, so a renewal is answered within a few
// hundred milliseconds. Real members, real kernel, the bound generous.
func TestSupervisorClientBackSoonAfterAHeal(t *testing.T) {
	c := newCluster(t)
	hosts := c.Topo.InRack("etcd")
	after := renewalAfterHeal(t, c, etcdconn.RaceDialer(c.namespaceDial("m1")), 7*time.Second,
		func(ctx context.Context) error { return c.Topo.Cut(ctx, []string{"m1"}, hosts) },
		func(ctx context.Context) error { return c.Topo.Heal(ctx, []string{"m1"}, hosts) })
	requireBackSoon(t, after)
}

// requireBackSoon fails t when the first renewal after the heal took more
// than a generous 1.5 s: the client was still reconnecting.
func requireBackSoon(t *testing.T, after time.Duration) {
	t.Helper()
	if after > 1500*time.Millisecond {
		t.Fatalf("the first renewal answered after the heal came %v after it; the client was still reconnecting", after.Round(time.Millisecond))
	}
	t.Logf("first renewal answered %v after the heal", after.Round(time.Millisecond))
}

// TestSupervisorClientBackSoonAfterASilentHeal is the same behind a dead
// switch (topo.Silence): the lab's blackhole routes fail a connection
// attempt at its sender at once, so gRPC's next redial after the heal
// connects; behind a switch that drops everything, an attempt's SYN is
// lost and the kernel sends it again only 1 s later, inside an attempt
// gRPC keeps for dial_timeout. The daemon's dialer (etcdconn.RaceDialer)
// starts a fresh attempt every 200 ms while the earlier ones wait. First
// the silence itself is checked: an attempt made in it must neither
// connect nor fail within 300 ms.
func TestSupervisorClientBackSoonAfterASilentHeal(t *testing.T) {
	c := newCluster(t)
	hosts := c.Topo.InRack("etcd")
	silence := func(ctx context.Context) error { return c.Topo.Silence(ctx, []string{"m1"}, hosts) }
	unsilence := func(ctx context.Context) error { return c.Topo.Unsilence(ctx, []string{"m1"}, hosts) }
	ctx := context.Background()
	if err := silence(ctx); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	conn, err := c.Topo.DialContext(dctx, "m1", "tcp", net.JoinHostPort(c.Topo.Addr("e1").String(), "2379"))
	cancel()
	if uerr := unsilence(ctx); uerr != nil {
		t.Fatal(uerr)
	}
	if conn != nil {
		conn.Close()
	}
	if err == nil || dctx.Err() == nil {
		t.Fatalf("a connection attempt inside the silence ended with %v before 300 ms: the silence is not silent", err)
	}

	requireBackSoon(t, renewalAfterHeal(t, c, etcdconn.RaceDialer(c.namespaceDial("m1")), 4*time.Second, silence, unsilence))
}

// BenchmarkRenewalAfterSilentHeal times, per heal of a 4 s silence (as
// TestSupervisorClientBackSoonAfterASilentHeal), the first renewal answered
// after it, with gRPC's own dialer and with the daemon's, in one run:
//
//	CI=true go test ./lab/etcd -run '^$' -bench RenewalAfterSilentHeal -benchtime 10x
func BenchmarkRenewalAfterSilentHeal(b *testing.B) {
	c := newCluster(b)
	hosts := c.Topo.InRack("etcd")
	silence := func(ctx context.Context) error { return c.Topo.Silence(ctx, []string{"m1"}, hosts) }
	unsilence := func(ctx context.Context) error { return c.Topo.Unsilence(ctx, []string{"m1"}, hosts) }
	for _, v := range []struct {
		name string
		dial func(ctx context.Context, addr string) (net.Conn, error)
	}{
		{"grpc-dialer", func(ctx context.Context, addr string) (net.Conn, error) {
			return c.Topo.DialContext(ctx, "m1", "tcp", addr)
		}},
		{"race-dialer", etcdconn.RaceDialer(c.namespaceDial("m1"))},
	} {
		b.Run(v.name, func(b *testing.B) {
			var ms []float64
			for range b.N {
				ms = append(ms, float64(renewalAfterHeal(b, c, v.dial, 4*time.Second, silence, unsilence))/float64(time.Millisecond))
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "ms-median")
			b.ReportMetric(ms[len(ms)-1], "ms-max")
			b.ReportMetric(ms[0], "ms-min")
		})
	}
}

// namespaceDial dials from host's network namespace.
func (c *Cluster) namespaceDial(host string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, host, network, addr)
	}
}

// renewalAfterHeal builds the daemon's client for e1 (etcdconn.ClientConfig)
// dialling with dial from m1's namespace, renews a lease every 250 ms,
// breaks the link with cut for hold, heals it, and returns how long after
// the heal the first renewal was answered.
func renewalAfterHeal(t testing.TB, c *Cluster, dial func(ctx context.Context, addr string) (net.Conn, error), hold time.Duration,
	cut, heal func(context.Context) error) time.Duration {
	t.Helper()
	ctx := context.Background()
	cc, err := etcdconn.ClientConfig(config.Etcd{Endpoints: []string{c.ClientURL("e1")}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.clientCert("lab")
	if err != nil {
		t.Fatal(err)
	}
	cc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}
	cc.Logger = zap.NewNop()
	cc.DialOptions = append(cc.DialOptions, grpc.WithContextDialer(dial))
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	lease, err := cli.Grant(gctx, 60)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	type answer struct{ sent, at time.Time }
	answers := make(chan answer, 1000)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for rctx.Err() == nil {
			go func() {
				sent := time.Now()
				kctx, cancel := context.WithTimeout(rctx, time.Second)
				defer cancel()
				if _, err := cli.KeepAliveOnce(clientv3.WithRequireLeader(kctx), lease.ID); err == nil {
					answers <- answer{sent, time.Now()}
				}
			}()
			select {
			case <-rctx.Done():
			case <-tick.C:
			}
		}
	}()
	defer func() { stop(); <-done }()

	if err := cut(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hold)
	if err := heal(ctx); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case a := <-answers:
			if a.at.Before(healed) {
				continue // answered before the cut took hold
			}
			return a.at.Sub(healed)
		case <-deadline:
			t.Fatal("no renewal answered within 15 s of the heal")
			return 0
		}
	}
}
