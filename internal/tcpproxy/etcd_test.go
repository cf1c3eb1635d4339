package tcpproxy_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
)

// TestEtcdThroughBlackhole cuts an etcd client off with the proxy and heals
// it, in two ways:
//
//   - heal at once: the connection survives (the proxy held the request) and
//     the next request succeeds on it;
//   - heal only after gRPC keepalive gave up: the client closed its
//     connection and redialled (the new connection is accepted but held by
//     the blackhole), and after the heal requests succeed on the new one.
//
// gRPC raises any keepalive time below 10 s to 10 s, and etcd's client pings
// only while an RPC is open unless PermitWithoutStream is set; the second
// case sets it so that keepalive runs on an idle client.
func TestEtcdThroughBlackhole(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	u, err := url.Parse(c.Member(0).Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		idlePing    bool // PermitWithoutStream
		waitRedials bool // stay blackholed until the client redialled
	}{
		{"heal-at-once", false, false},
		{"heal-after-keepalive-redial", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(t, u.Host)
			cli, err := clientv3.New(clientv3.Config{
				Endpoints:            []string{"http://" + p.Addr()},
				DialTimeout:          2 * time.Second,
				DialKeepAliveTime:    2 * time.Second, // raised to 10 s by gRPC
				DialKeepAliveTimeout: time.Second,
				PermitWithoutStream:  tc.idlePing,
				Logger:               zap.NewNop(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			get := func() error {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, err := cli.Get(ctx, "k")
				return err
			}
			if err := get(); err != nil {
				t.Fatalf("get through the open proxy: %v", err)
			}

			p.Blackhole(true)
			cut := time.Now()
			err = get()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("get through the blackholed proxy: %v; want a deadline error", err)
			}
			if tc.waitRedials {
				for p.Accepted() < 2 {
					if time.Since(cut) > 60*time.Second {
						t.Fatal("gRPC keepalive never closed the blackholed connection")
					}
					time.Sleep(100 * time.Millisecond)
				}
				t.Logf("client redialled %v after the cut", time.Since(cut).Round(time.Millisecond))
			}

			p.Blackhole(false)
			healed := time.Now()
			attempts := 0
			for {
				attempts++
				err := get()
				if err == nil {
					break
				}
				if time.Since(healed) > 30*time.Second {
					t.Fatalf("etcd still unreachable 30s after the heal: %v", err)
				}
				t.Logf("after heal, attempt %d: %v", attempts, err)
			}
			t.Logf("recovered %v after the heal, on attempt %d; connections accepted: %d",
				time.Since(healed).Round(time.Millisecond), attempts, p.Accepted())
			if !tc.waitRedials && p.Accepted() != 1 {
				t.Errorf("client made %d connections; want the first one to survive a short blackhole", p.Accepted())
			}
		})
	}
}
