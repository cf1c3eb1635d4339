package cgroup_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/cgroup"
)

// fakeTree builds a cgroup-like tree: hierarchy dirs with a cgroup.procs
// at their top (that is how FS recognises a hierarchy), and the unit's
// group with a sub-group, listing procs.
func fakeTree(t *testing.T, hierarchy string, group string, procs map[string][]int) string {
	t.Helper()
	root := t.TempDir()
	h := filepath.Join(root, hierarchy)
	write := func(dir string, pids []int) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, p := range pids {
			b.WriteString(strconv.Itoa(p) + "\n")
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(h, nil)
	for sub, pids := range procs {
		write(filepath.Join(h, group, sub), pids)
	}
	return root
}

func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func TestKillEmptiesGroupAndSubgroups(t *testing.T) {
	for _, layout := range []string{".", "systemd", "unified"} {
		t.Run(layout, func(t *testing.T) {
			a, b := sleeper(t), sleeper(t)
			const g = "/system.slice/kube-scheduler.service"
			root := fakeTree(t, layout, g, map[string][]int{".": {a.Process.Pid}, "sub": {b.Process.Pid}})
			fs := cgroup.FS{Root: root}
			got, err := fs.Procs(g)
			slices.Sort(got)
			want := []int{a.Process.Pid, b.Process.Pid}
			slices.Sort(want)
			if err != nil || !slices.Equal(got, want) {
				t.Fatalf("Procs = %v, %v; want %v", got, err, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := fs.Kill(ctx, g); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			for _, c := range []*exec.Cmd{a, b} {
				if err := c.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
					t.Fatalf("sleep %d: %v, want killed", c.Process.Pid, err)
				}
			}
		})
	}
}

func TestAbsentGroupHasNoProcesses(t *testing.T) {
	root := fakeTree(t, ".", "/other.slice", map[string][]int{".": nil})
	got, err := cgroup.FS{Root: root}.Procs("/system.slice/gone.service")
	if err != nil || len(got) != 0 {
		t.Fatalf("Procs of an absent group = %v, %v", got, err)
	}
}

func TestNoHierarchyIsAnError(t *testing.T) {
	// Not a cgroup filesystem: nothing can be confirmed, and must not be.
	if _, err := (cgroup.FS{Root: t.TempDir()}).Procs("/system.slice/x.service"); err == nil {
		t.Fatal("Procs under a directory without cgroup hierarchies succeeded")
	}
}

func TestRefusesRootAndDotDot(t *testing.T) {
	root := fakeTree(t, ".", "/system.slice", map[string][]int{".": nil})
	for _, g := range []string{"", "/", "/system.slice/../..", "../x"} {
		if _, err := (cgroup.FS{Root: root}).KillOnce(g); err == nil {
			t.Fatalf("KillOnce(%q) succeeded", g)
		}
	}
}
