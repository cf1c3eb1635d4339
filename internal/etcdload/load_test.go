package etcdload

import (
	"bytes"
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
)

func TestWriterPrefillAndMaintenance(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	ctx := context.Background()
	if err := Prefill(ctx, cli, "/load/", 200, 1024); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := Writer{Client: cli, Prefix: "/load/w/", Rate: 200, Size: 1024, Keys: 50}.Run(rctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer: %s", r)
	if r.Writes < 20 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Fatalf("writer result %+v: want writes, no errors and ordered percentiles", r)
	}
	resp, err := cli.Get(ctx, "/load/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count < 200+1 {
		t.Fatalf("keys under /load/: %v (err %v), want the prefill and the writer's", resp, err)
	}
	if _, err := Compact(ctx, cli, "/load/"); err != nil {
		t.Fatal(err)
	}
	if _, err := Defragment(ctx, cli, c.Member(0).Endpoint()); err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	n, _, err := Snapshot(ctx, cli, &snap)
	if err != nil || n < 200*1024 || int64(snap.Len()) != n {
		t.Fatalf("snapshot of %d bytes (buffer %d, err %v): want at least the prefill", n, snap.Len(), err)
	}
}

func TestWriterRefusesAnIncompleteSpec(t *testing.T) {
	if _, err := (Writer{Rate: 10, Size: 1}).Run(context.Background()); err == nil {
		t.Fatal("a writer without a client ran")
	}
}
