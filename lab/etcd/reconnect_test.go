package etcd

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"sync/atomic"
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
	after := renewalAfterHeal(t, daemonClient(t, c, c.namespaceDial("m1")), 7*time.Second,
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
// lost and the kernel sends it again only 1 s after the first, inside an
// attempt gRPC keeps for dial_timeout. The daemon's client
// (etcdconn.ClientConfig's racing dialer) starts a fresh attempt every
// 200 ms while the earlier ones wait: the test counts the attempts made
// inside the 4 s silence (gRPC's own dialing makes about two; the daemon's
// must make many more), then requires the generous bound of its sibling.
// First the silence itself is checked: an attempt made in it must neither
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
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	conn, err := c.Topo.DialContext(dctx, "m1", "tcp", net.JoinHostPort(c.Topo.Addr("e1").String(), "2379"))
	took := time.Since(start)
	cancel()
	if uerr := unsilence(ctx); uerr != nil {
		t.Fatal(uerr)
	}
	if conn != nil {
		conn.Close()
	}
	// By the clock: dctx is cancelled by now, and even before that the
	// dial's deadline can fire ahead of the context's timer.
	if err == nil || took < 250*time.Millisecond {
		t.Fatalf("a connection attempt inside the silence ended after %v (before 300 ms) with %v: the silence is not silent", took, err)
	}

	var attempts atomic.Int64
	var counting atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if counting.Load() {
			attempts.Add(1)
		}
		return c.Topo.DialContext(ctx, "m1", network, addr)
	}
	const hold = 4 * time.Second
	after := renewalAfterHeal(t, daemonClient(t, c, dial), hold,
		func(ctx context.Context) error { counting.Store(true); return silence(ctx) },
		func(ctx context.Context) error { counting.Store(false); return unsilence(ctx) })
	// gRPC drops the connection about a second into the silence (its
	// keepalive timeout), then dials: one attempt per synRace (200 ms) for
	// the rest of it, where one attempt per dial_timeout (2 s) was made.
	if n := attempts.Load(); n < 8 {
		t.Errorf("%d connection attempts in a %s silence: the client does not race its SYNs (etcdconn.ClientConfig)", n, hold)
	} else {
		t.Logf("%d connection attempts in the %s silence", n, hold)
	}
	requireBackSoon(t, after)
}

// BenchmarkRenewalAfterSilentHeal times, per heal of a 4 s silence (as
// TestSupervisorClientBackSoonAfterASilentHeal), the first renewal answered
// after it, with gRPC's own dialing and with the daemon's client, in one
// run:
//
//	CI=true go test ./lab/etcd -run '^$' -bench RenewalAfterSilentHeal -benchtime 10x
func BenchmarkRenewalAfterSilentHeal(b *testing.B) {
	c := newCluster(b)
	hosts := c.Topo.InRack("etcd")
	silence := func(ctx context.Context) error { return c.Topo.Silence(ctx, []string{"m1"}, hosts) }
	unsilence := func(ctx context.Context) error { return c.Topo.Unsilence(ctx, []string{"m1"}, hosts) }
	plain := daemonClient(b, c, c.namespaceDial("m1"))
	// gRPC's own dialing: one attempt at a time (the last dialer option wins).
	plain.DialOptions = append(plain.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, "m1", "tcp", addr)
	}))
	for _, v := range []struct {
		name string
		cc   clientv3.Config
	}{
		{"grpc-dialer", plain},
		{"daemon-client", daemonClient(b, c, c.namespaceDial("m1"))},
	} {
		b.Run(v.name, func(b *testing.B) {
			var ms []float64
			for range b.N {
				ms = append(ms, float64(renewalAfterHeal(b, v.cc, 4*time.Second, silence, unsilence))/float64(time.Millisecond))
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "ms-median")
			b.ReportMetric(ms[len(ms)-1], "ms-max")
			b.ReportMetric(ms[0], "ms-min")
		})
	}
}

// daemonClient is the daemon's client configuration for e1
// (etcdconn.ClientConfigDialing, as ClientConfig builds it) dialling with
// dial, with the lab's client certificate.
func daemonClient(t testing.TB, c *Cluster, dial func(ctx context.Context, network, addr string) (net.Conn, error)) clientv3.Config {
	t.Helper()
	cc, err := etcdconn.ClientConfigDialing(config.Etcd{Endpoints: []string{c.ClientURL("e1")}, DialTimeout: 2 * time.Second}, dial)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := c.clientCert("lab")
	if err != nil {
		t.Fatal(err)
	}
	cc.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}
	cc.Logger = zap.NewNop()
	return cc
}

// namespaceDial dials from host's network namespace.
func (c *Cluster) namespaceDial(host string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, host, network, addr)
	}
}

// renewalAfterHeal builds a client from cc, renews a lease every 250 ms,
// breaks the link with cut for hold, heals it, and returns how long after
// the heal the first renewal was answered.
func renewalAfterHeal(t testing.TB, cc clientv3.Config, hold time.Duration,
	cut, heal func(context.Context) error) time.Duration {
	t.Helper()
	ctx := context.Background()
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
