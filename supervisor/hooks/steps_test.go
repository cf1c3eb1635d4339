package hooks

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Each step runs its own configured hook with the term's environment; a
// step without a hook does nothing, and an unknown step is refused.
// (fencing.env is the supervisor's: TestFencingEnvFollowsTheTerm.)
func TestStepsRunTheHookByName(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "hook.log")
	hook := func(name string) []string {
		return []string{"/bin/sh", "-c", `echo "` + name + ` $KHA_FENCING_TOKEN" >> ` + log}
	}
	r := Steps{Hooks: func() config.Hooks {
		h := config.Default().Hooks
		h.OnPromote, h.OnDemote, h.OnFence = hook("on_promote"), hook("on_demote"), nil
		return h
	}}
	env := map[string]string{"KHA_NODE": "m1", "KHA_CLUSTER": "c", "KHA_ROLE": "promoting", "KHA_FENCING_TOKEN": "42"}
	ctx := context.Background()
	for _, name := range []string{"on_promote", "on_demote", "on_fence", "on_promote"} {
		if err := r.Hook(ctx, name, env); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if err := r.Hook(ctx, "on_reboot", env); err == nil {
		t.Error("an unknown hook name was accepted")
	}
	if b, _ := os.ReadFile(log); string(b) != "on_promote 42\non_demote 42\non_promote 42\n" {
		t.Errorf("hooks ran %q", b)
	}
}
