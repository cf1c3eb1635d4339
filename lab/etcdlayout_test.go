package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The stacked layout puts e1 in m1's rack and e2 in m2's, each the only
// member of its master's apiserver, e3 alone; the supervisors keep all
// three. What up saved is what later commands use.
func TestStackedEtcdLayout(t *testing.T) {
	dir := t.TempDir()
	sep, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if sep.EtcdLayout() != LayoutSeparate || len(sep.APIServerEtcdEndpoints("m1")) != 3 || sep.StackedMember("m1") != "" {
		t.Fatalf("a new lab: layout %s, m1's apiserver on %v, member %q; want separate, all three, none",
			sep.EtcdLayout(), sep.APIServerEtcdEndpoints("m1"), sep.StackedMember("m1"))
	}
	st, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", EtcdLayout: LayoutStacked})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Topo.InRack("r1"); !slices.Equal(got, []string{"m1", "e1"}) {
		t.Errorf("stacked: rack r1 holds %v, want m1 and e1 (a rack cut takes the member with its master)", got)
	}
	if got := st.Topo.InRack("etcd"); !slices.Equal(got, []string{"e3"}) {
		t.Errorf("stacked: the etcd rack holds %v, want e3 alone", got)
	}
	if got := st.APIServerEtcdEndpoints("m2"); !slices.Equal(got, []string{"https://10.77.2.22:2379"}) {
		t.Errorf("stacked: m2's apiserver on %v, want its own member e2 only", got)
	}
	if got := st.Etcd.Endpoints(); len(got) != 3 {
		t.Errorf("stacked: the supervisors' endpoints %v, want all three", got)
	}
	// The stand-ins have no apiserver: up refuses the layout without the
	// real plane.
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := st.saveEtcdLayout(); err == nil || !strings.Contains(err.Error(), "--plane real") {
		t.Fatalf("stacked without the real plane: err = %v, want a refusal naming --plane real", err)
	}
	st.plane = &fakePlane{}
	if err := st.saveEtcdLayout(); err != nil {
		t.Fatal(err)
	}
	later, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if later.EtcdLayout() != LayoutStacked || later.Topo.Addr("e1").String() != "10.77.1.21" {
		t.Fatalf("a later command on a stacked lab: layout %s, e1 at %s", later.EtcdLayout(), later.Topo.Addr("e1"))
	}
	if _, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", EtcdLayout: LayoutSeparate}); err == nil || !strings.Contains(err.Error(), "down") {
		t.Fatalf("asking separate of a stacked lab: err = %v, want a refusal naming `kha-lab down`", err)
	}
	if _, err := New(Config{Prefix: "khtest2", StateDir: t.TempDir(), Binary: "/bin/true", EtcdLayout: "hyper"}); err == nil || !strings.Contains(err.Error(), `"hyper"`) {
		t.Fatalf("unknown layout: err = %v, want one naming it", err)
	}
}

// up refuses the stacked layout without the real plane before it writes
// anything (a retry with --plane real must not meet a saved witness
// plane); a lab brought up before the layouts (its timing saved, no
// layout) is separate and is not stacked in place.
func TestStackedLayoutRefusedEarlyAndNotOverAnOlderLab(t *testing.T) {
	dir := t.TempDir()
	st, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", EtcdLayout: LayoutStacked})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Up(t.Context()); err == nil || !strings.Contains(err.Error(), "--plane real") {
		t.Fatalf("up, stacked without the real plane: err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "run")); !os.IsNotExist(err) {
		t.Fatalf("the refused up left state behind: %v", err)
	}

	old := t.TempDir()
	if err := os.MkdirAll(filepath.Join(old, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "run", "etcd-timing"), []byte("stock\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Prefix: "khtest", StateDir: old, Binary: "/bin/true"})
	if err != nil || l.EtcdLayout() != LayoutSeparate {
		t.Fatalf("a lab of an older kha-lab: layout %q, err %v; want separate", l.EtcdLayout(), err)
	}
	if _, err := New(Config{Prefix: "khtest", StateDir: old, Binary: "/bin/true", EtcdLayout: LayoutStacked}); err == nil || !strings.Contains(err.Error(), "down") {
		t.Fatalf("stacking a lab of an older kha-lab in place: err = %v, want a refusal naming `kha-lab down`", err)
	}
	if _, err := New(Config{Prefix: "khtest", StateDir: old, Binary: "/bin/true", EtcdLayout: LayoutSeparate}); err != nil {
		t.Fatalf("asking separate of it: %v", err)
	}
}
