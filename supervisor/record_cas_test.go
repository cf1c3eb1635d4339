package supervisor

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// lateTxn holds the next Txn once armed: the caller sees its deadline
// pass, but the request itself is sent later, on a context of its own, when
// released, exactly as a write that timed out through a stalled etcd member
// and was applied after a newer one.
type lateTxn struct {
	mu       sync.Mutex
	armed    bool
	release  chan struct{}
	appplied chan error
}

func (l *lateTxn) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	hold := l.armed && method == "/etcdserverpb.KV/Txn"
	l.armed = l.armed && !hold
	l.mu.Unlock()
	if !hold {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	go func() {
		<-l.release
		l.appplied <- invoker(context.Background(), method, req, reply, cc, opts...)
	}()
	<-ctx.Done()
	return ctx.Err()
}

func TestLateRecordWriteNeverLandsAfterANewerOne(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	late := &lateTxn{release: make(chan struct{}), appplied: make(chan error, 1)}
	ccfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	ccfg.DialOptions = append(ccfg.DialOptions, grpc.WithChainUnaryInterceptor(late.intercept))
	cli, err := clientv3.New(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg := config.Default()
	cfg.Node, cfg.Cluster = "m1", "test"
	cfg.Etcd.RequestTimeout = 300 * time.Millisecond
	s, err := New(Options{Config: cfg, Client: cli, Units: fencing.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	// The record as registration leaves it: created on our lease.
	key := s.keys.Member("m1")
	b, _ := json.Marshal(s.record())
	put, err := cli.Put(ctx, key, string(b), clientv3.WithLease(g.ID))
	if err != nil {
		t.Fatal(err)
	}
	s.rec.lease.Store(int64(g.ID))
	s.wroteRevision(put.Header.Revision)

	// "Units stopped" times out on the client and is applied later...
	late.mu.Lock()
	late.armed = true
	late.mu.Unlock()
	if err := s.writeRecord(ctx, false); err == nil {
		t.Fatal("the held write reported success")
	}
	// ... after the promotion's "units may run" went through.
	s.term.unitsMayRun.Store(true)
	if err := s.writeRecord(ctx, false); err != nil {
		t.Fatalf("write units running: %v", err)
	}
	close(late.release)
	if err := <-late.appplied; err != nil {
		t.Fatalf("the late write was not applied at all: %v", err)
	}
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read record: %v %v", resp, err)
	}
	var got group.Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &got); err != nil {
		t.Fatal(err)
	}
	if !got.UnitsRunning {
		t.Fatalf("record says units stopped after the later write said they may run: the late write landed (%s)", resp.Kvs[0].Value)
	}
	// A lost race is re-read and republished: the next write still lands.
	if err := s.writeRecord(ctx, false); err != nil {
		t.Fatalf("write after the late one: %v", err)
	}
}
