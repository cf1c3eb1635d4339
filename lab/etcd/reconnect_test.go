package etcd

import (
	"context"
	"crypto/tls"
	"net"
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
	cc.DialOptions = append(cc.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, "m1", "tcp", addr)
	}))
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

	etcdHosts := c.Topo.InRack("etcd")
	if err := c.Topo.Cut(ctx, []string{"m1"}, etcdHosts); err != nil {
		t.Fatal(err)
	}
	time.Sleep(7 * time.Second)
	if err := c.Topo.Heal(ctx, []string{"m1"}, etcdHosts); err != nil {
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
			if after := a.at.Sub(healed); after > 1500*time.Millisecond {
				t.Fatalf("the first renewal answered after the heal came %v after it (sent %v after it); the client was still reconnecting",
					after.Round(time.Millisecond), a.sent.Sub(healed).Round(time.Millisecond))
			} else {
				t.Logf("first renewal answered %v after the heal", after.Round(time.Millisecond))
			}
			return
		case <-deadline:
			t.Fatal("no renewal answered within 15 s of the heal")
		}
	}
}
