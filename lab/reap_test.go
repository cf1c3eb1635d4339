package lab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

// A lab whose owner died is reaped; one whose owner lives is left alone.
func TestReap(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "sysctl", "true")
	ctx := context.Background()
	family := fmt.Sprintf("khrp%03x", rand.IntN(1<<12))
	dead := &Lab{cfg: Config{Prefix: family + "a", StateDir: t.TempDir(), DataDir: t.TempDir()}}
	live := &Lab{cfg: Config{Prefix: family + "b", StateDir: t.TempDir(), DataDir: t.TempDir()}}
	for _, l := range []*Lab{dead, live} {
		nl, err := New(l.cfg)
		if err != nil {
			t.Fatal(err)
		}
		*l = *nl
		t.Cleanup(func() { _ = l.Down(context.Background()) })
		if err := l.Topo.Up(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The dead lab's owner: a process that has exited (and been reaped).
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := dead.recordOwner(pid); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := live.recordOwner(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	reaped, err := Reap(ctx, family)
	if err != nil {
		t.Fatal(err)
	}
	if len(reaped) != 1 || reaped[0] != dead.cfg.Prefix {
		t.Fatalf("reaped %v, want only %s", reaped, dead.cfg.Prefix)
	}
	if ns, _ := topo.Namespaces(dead.cfg.Prefix); len(ns) != 0 {
		t.Fatalf("dead lab's namespaces left: %v", ns)
	}
	if _, err := os.Stat(filepath.Join(ownersDir, dead.cfg.Prefix)); !os.IsNotExist(err) {
		t.Fatalf("dead lab's owner record left: %v", err)
	}
	if ns, _ := topo.Namespaces(live.cfg.Prefix); len(ns) == 0 {
		t.Fatalf("the live lab was reaped")
	}
}
