package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

type fakePlane struct{ adjusted bool }

func (f *fakePlane) Adjust(*topo.Topology, *etcd.Cluster)             { f.adjusted = true }
func (f *fakePlane) Binds() []nspawn.Bind                             { return []nspawn.Bind{{Host: "/x", ReadOnly: true}} }
func (f *fakePlane) Start(context.Context) error                      { return nil }
func (f *fakePlane) InstallUnits(context.Context, *master.Node) error { return nil }
func (f *fakePlane) Ready(context.Context) error                      { return nil }

// A lab brought up with one plane refuses the other until it is down: its
// masters were booted for the first (binds, units).
func TestPlaneIsRecordedAndAnotherRefused(t *testing.T) {
	dir := t.TempDir()
	w, err := New(Config{Prefix: "rpt", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p, _ := w.SavedPlane(); p != PlaneWitness {
		t.Errorf("no record: plane %q, want witness", p)
	}
	if err := w.savePlane(); err != nil {
		t.Fatal(err)
	}
	r, _ := New(Config{Prefix: "rpt", StateDir: dir, Binary: "/bin/true"})
	fp := &fakePlane{}
	r.UsePlane(fp)
	if !fp.adjusted || len(r.planeBinds()) != 1 || len(w.planeBinds()) != 0 {
		t.Errorf("adjusted %v, binds %v / %v", fp.adjusted, r.planeBinds(), w.planeBinds())
	}
	err = r.savePlane()
	if err == nil || !strings.Contains(err.Error(), "runs the witness plane; --plane real needs `kha-lab down` first") {
		t.Errorf("error %v, want the refusal naming both planes", err)
	}
}
