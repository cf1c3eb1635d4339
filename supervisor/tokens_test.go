package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// hookLog records each hook a member ran and what its fencing.env said
// right then.
type hookLog struct {
	mu    sync.Mutex
	lines []string
}

func (h *hookLog) options(dir string) func(string, *supervisor.Options) {
	return func(name string, o *supervisor.Options) {
		o.FencingEnv = filepath.Join(dir, name, "fencing.env")
		o.Hook = func(_ context.Context, hook string, env map[string]string) error {
			b, err := os.ReadFile(o.FencingEnv)
			seen := "no fencing.env"
			if err == nil {
				seen = "fencing.env without a token"
				for _, l := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(l, "KHA_FENCING_TOKEN=") {
						seen = l
					}
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			h.lines = append(h.lines, fmt.Sprintf("%s %s %s token %s: %s", name, hook, env["KHA_ROLE"], env["KHA_FENCING_TOKEN"], seen))
			return nil
		}
	}
}

func (h *hookLog) get() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lines)
}

// TestFencingEnvFollowsTheTerm: fencing.env, the token's first destination,
// holds the term's token before on_promote runs and before any unit starts,
// and is gone before on_fence or on_demote runs, once the units are down.
func TestFencingEnvFollowsTheTerm(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	var h hookLog
	w.Options = h.options(dir)
	m1 := w.Start("m1", nil)
	waitFor(t, "m1 to lead", 20*time.Second, func() bool { return m1.State() == group.Active })
	tok1 := m1.Sup.Status().Token
	env1 := filepath.Join(dir, "m1", "fencing.env")
	if b, err := os.ReadFile(env1); err != nil || !strings.Contains(string(b), fmt.Sprintf("\nKHA_FENCING_TOKEN=%d\nKHA_NODE=m1\n", tok1)) {
		t.Fatalf("active m1's fencing.env = %q (err %v), want its token %d", b, err, tok1)
	}
	// A fence: the key deleted by hand.
	if _, err := w.Admin.Delete(context.Background(), m1.Sup.Keys().Leader()); err != nil {
		t.Fatal(err)
	}
	if err := m1.WaitExit(t, 10*time.Second, "fence"); !errors.As(err, new(*supervisor.FenceError)) {
		t.Fatalf("m1: Run returned %v, want a FenceError", err)
	}
	if _, err := os.Stat(env1); !os.IsNotExist(err) {
		t.Fatalf("m1's fencing.env outlived its fence (err %v)", err)
	}
	// A demotion: m2 leads, then shuts down.
	m2 := w.Start("m2", nil)
	waitFor(t, "m2 to lead", 20*time.Second, func() bool { return m2.State() == group.Active })
	tok2 := m2.Sup.Status().Token
	m2.Cancel()
	if err := m2.WaitExit(t, 10*time.Second, "shutdown"); err != nil {
		t.Fatalf("m2: Run returned %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "m2", "fencing.env")); !os.IsNotExist(err) {
		t.Fatalf("m2's fencing.env outlived its demotion (err %v)", err)
	}
	want := []string{
		fmt.Sprintf("m1 on_promote promoting token %d: KHA_FENCING_TOKEN=%d", tok1, tok1),
		fmt.Sprintf("m1 on_fence fencing token %d: no fencing.env", tok1),
		fmt.Sprintf("m2 on_promote promoting token %d: KHA_FENCING_TOKEN=%d", tok2, tok2),
		fmt.Sprintf("m2 on_demote demoting token %d: no fencing.env", tok2),
	}
	if got := h.get(); !slices.Equal(got, want) {
		t.Fatalf("hooks saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestFencingEnvFailureFollowsAbortOnPromoteFailure: a fencing.env that
// cannot be written fails the promotion before any unit starts, unless
// hooks.abort_on_promote_failure = false; then the member promotes without
// it, and (as always: one step) without running on_promote.
func TestFencingEnvFailureFollowsAbortOnPromoteFailure(t *testing.T) {
	for _, abort := range []bool{true, false} {
		t.Run(fmt.Sprintf("abort=%v", abort), func(t *testing.T) {
			w := newWorld(t)
			blocker := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(blocker, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			var h hookLog
			opts := h.options(t.TempDir())
			w.Options = func(name string, o *supervisor.Options) {
				opts(name, o)
				o.FencingEnv = filepath.Join(blocker, "fencing.env") // under a file: cannot be written
			}
			start := time.Now()
			m := w.Start("m1", func(c *config.Config) { c.Hooks.AbortOnPromoteErr = abort })
			if !abort {
				waitFor(t, "m1 to lead without fencing.env", 20*time.Second, func() bool { return m.State() == group.Active })
				if got := h.get(); len(got) != 0 {
					t.Fatalf("on_promote ran after fencing.env failed: %q", got)
				}
				return
			}
			waitFor(t, "m1's promotion to fail", 20*time.Second, func() bool {
				return strings.Contains(m.Sup.Status().Reason, "promotion failed: on_promote hook: write "+filepath.Join(blocker, "fencing.env"))
			})
			if at := firstStartAfter(m, start); !at.IsZero() {
				t.Fatalf("a unit started at %s although fencing.env could not be written", at)
			}
		})
	}
}
