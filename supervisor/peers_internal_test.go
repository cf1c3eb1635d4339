package supervisor

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// errorCounter counts ERROR records.
type errorCounter struct{ n atomic.Int64 }

func (c *errorCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *errorCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		c.n.Add(1)
	}
	return nil
}
func (c *errorCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *errorCounter) WithGroup(string) slog.Handler      { return c }

// The decision alone, on records made up here (the real-etcd tests are
// TestMismatchedConfigurationIsReported and TestMissingPeerIsReported):
// one ERROR per change, none while nothing changes.
func TestCheckPeersLogsOncePerChange(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg := config.Default()
	cfg.Node, cfg.Cluster, cfg.Peers = "m1", "test", []string{"m1", "m2"}
	cfg.Units.Managed = []string{"a.service", "b.service"}
	ec := &errorCounter{}
	s, err := New(Options{Config: cfg, Client: cli, Units: fencing.NewMemory(), Log: slog.New(ec)})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	pc := &peerCheck{started: t0, seen: map[string]time.Time{}, missing: map[string]bool{}, mismatch: map[string]string{}}
	ttl := cfg.Lease.TTL
	other := s.agreement()
	other.Units = []string{"b.service", "a.service"}
	odd := map[string]group.Record{"m3": {Node: "m3", Agree: &other, Fingerprint: other.Fingerprint()}}

	steps := []struct {
		name     string
		recs     map[string]group.Record
		at       time.Duration
		errors   int64
		mismatch int
		missing  int
	}{
		{"m2 absent, within a TTL", nil, ttl / 2, 0, 0, 0},
		{"m2 absent past a TTL", nil, ttl + time.Second, 1, 0, 1},
		{"still absent: no new error", nil, ttl + 2*time.Second, 1, 0, 1},
		{"m3 configured differently", odd, ttl + 3*time.Second, 2, 1, 1},
		{"unchanged", odd, ttl + 4*time.Second, 2, 1, 1},
		{"m2 back, m3 gone", map[string]group.Record{"m2": {Node: "m2"}}, ttl + 5*time.Second, 2, 0, 0},
		{"m2 gone again, not yet a TTL", nil, 2*ttl + 4*time.Second, 2, 0, 0},
		{"m2 gone past a TTL again", nil, 2*ttl + 6*time.Second, 3, 0, 1},
	}
	for _, st := range steps {
		s.checkPeers(pc, st.recs, t0.Add(st.at))
		got := s.Status()
		if n := ec.n.Load(); n != st.errors || len(got.ConfigMismatch) != st.mismatch || len(got.MissingPeers) != st.missing {
			t.Fatalf("%s: %d errors, mismatch %v, missing %v; want %d, %d, %d", st.name, n, got.ConfigMismatch, got.MissingPeers, st.errors, st.mismatch, st.missing)
		}
	}
}
