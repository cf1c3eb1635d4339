package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEtcdTimingResolution(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if l.EtcdTiming != StockEtcd || l.Etcd.ElectionMS != 1000 || l.Etcd.HeartbeatMS != 100 {
		t.Fatalf("a new lab runs %v (cluster %d/%d ms), want stock", l.EtcdTiming, l.Etcd.HeartbeatMS, l.Etcd.ElectionMS)
	}
	tuned, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", Etcd: "tuned"})
	if err != nil {
		t.Fatal(err)
	}
	if tuned.Etcd.ElectionMS != 500 || tuned.Etcd.HeartbeatMS != 50 {
		t.Fatalf("--etcd tuned: cluster %d/%d ms, want 50/500", tuned.Etcd.HeartbeatMS, tuned.Etcd.ElectionMS)
	}
	// What up saved is what later commands (and restarted members) use.
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tuned.saveEtcdTiming(); err != nil {
		t.Fatal(err)
	}
	later, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if later.EtcdTiming != TunedEtcd {
		t.Fatalf("a later command on a tuned lab runs %v", later.EtcdTiming)
	}
	if _, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", Etcd: "stock"}); err == nil || !strings.Contains(err.Error(), "down") {
		t.Fatalf("asking stock of a tuned lab: err = %v, want a refusal naming `kha-lab down`", err)
	}
	if _, err := New(Config{Prefix: "khtest2", StateDir: t.TempDir(), Binary: "/bin/true", Etcd: "fast"}); err == nil || !strings.Contains(err.Error(), `"fast"`) {
		t.Fatalf("unknown timing: err = %v, want one naming it", err)
	}
}
