package scenario

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

// ciFamily prefixes the CI labs; each run adds a random suffix so that two
// runs can coexist, and reaps the labs of runs that died.
const ciFamily = "khci"

// build compiles the real binaries: the lab runs kha-lab as etcd members,
// holder and witnesses, and kha-supervisor in the masters.
func build(t *testing.T, dir string) (khaLab, khaSup string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ out, pkg string }{{"kha-lab", "./cmd/kha-lab"}, {"kha-supervisor", "./cmd/kha-supervisor"}, {"kha-guard", "./cmd/kha-guard"}} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, p.out), p.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", p.pkg, err, out)
		}
	}
	return filepath.Join(dir, "kha-lab"), filepath.Join(dir, "kha-supervisor")
}

func TestCISubset(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "go", "ip", "sysctl", "systemd-nspawn", "nsenter")
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	if reaped, err := lab.Reap(ctx, ciFamily); err != nil {
		t.Fatalf("reap stale CI labs: %v", err)
	} else if len(reaped) > 0 {
		t.Logf("removed stale CI labs %v", reaped)
	}
	dir := t.TempDir()
	khaLab, khaSup := build(t, filepath.Join(dir, "bin"))
	prefix := fmt.Sprintf("%s%04x", ciFamily, rand.IntN(1<<16))
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l, err := lab.New(lab.Config{
		Prefix: prefix, StateDir: filepath.Join(dir, "state"), DataDir: filepath.Join(dir, "etcd"),
		Binary: khaLab, Supervisor: khaSup, Packaging: "../../packaging", Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := l.Down(ctx); err != nil {
			t.Errorf("down: %v", err)
		}
		assertGone(t, prefix)
		if t.Failed() {
			t.Logf("lab log:\n%s", logs.String())
			for _, f := range []string{"masters.log", "etcd-e1.log"} {
				b, _ := os.ReadFile(filepath.Join(l.OutDir(), f))
				t.Logf("%s:\n%s", f, tail(b, 4000))
			}
		}
	})
	if err := l.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	env, err := Open(ctx, l, log)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	rep, _, err := env.RunMatrix(ctx, CISubset(), 1, filepath.Join(dir, "reports"))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var md bytes.Buffer
	report.WriteMarkdown(&md, []*report.Report{rep})
	t.Logf("report:\n%s", md.String())
	for _, r := range rep.Results {
		for _, p := range r.Problems {
			t.Errorf("scenario %d (%s): %s", r.ID, r.Name, p)
		}
	}
	if len(rep.Overlaps) > 0 {
		t.Errorf("overlaps over the whole run: %v", rep.Overlaps)
	}
	if len(rep.Results) != len(CISubset()) || !rep.Pass {
		t.Errorf("CI subset did not pass (%d results)", len(rep.Results))
	}
}

// assertGone checks that Down left no namespace, container or mount.
func assertGone(t *testing.T, prefix string) {
	t.Helper()
	if nss, _ := topo.Namespaces(prefix); len(nss) > 0 {
		t.Errorf("namespaces left: %v", nss)
	}
	ents, _ := os.ReadDir(nspawn.BaseDir)
	for _, e := range ents {
		if len(e.Name()) > len(prefix) && e.Name()[:len(prefix)] == prefix {
			t.Errorf("container directory left: %s", e.Name())
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mounts, []byte("/"+prefix+"-")) {
		t.Errorf("mounts of %s left", prefix)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
