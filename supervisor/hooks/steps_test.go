package hooks

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// fencing.env exists exactly while the node may run its units: written on
// promotion, gone after a demotion or a fence.
func TestStepsKeepFencingEnvInStepWithTheTerm(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fencing.env")
	log := filepath.Join(dir, "hook.log")
	hook := func(name string) []string {
		return []string{"/bin/sh", "-c", `echo "` + name + ` $KHA_FENCING_TOKEN" >> ` + log}
	}
	r := Steps{FencingEnv: path, Hooks: func() config.Hooks {
		h := config.Default().Hooks
		h.OnPromote, h.OnDemote, h.OnFence = hook("on_promote"), hook("on_demote"), nil
		return h
	}}
	env := map[string]string{"KHA_NODE": "m1", "KHA_CLUSTER": "c", "KHA_ROLE": "promoting", "KHA_FENCING_TOKEN": "42"}
	ctx := context.Background()
	if err := r.Hook(ctx, "on_promote", env); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "KHA_FENCING_TOKEN=42\n") {
		t.Fatalf("after on_promote fencing.env = %q (err %v), want the token", b, err)
	}
	for _, name := range []string{"on_demote", "on_fence"} {
		if err := r.Hook(ctx, "on_promote", env); err != nil {
			t.Fatal(err)
		}
		if err := r.Hook(ctx, name, env); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("after %s fencing.env still exists (err %v)", name, err)
		}
	}
	// Removing what is not there is fine; an unknown hook is refused.
	if err := r.Hook(ctx, "on_fence", env); err != nil {
		t.Errorf("on_fence without a fencing.env: %v", err)
	}
	if err := r.Hook(ctx, "on_reboot", env); err == nil {
		t.Error("an unknown hook name was accepted")
	}
	if b, _ := os.ReadFile(log); string(b) != "on_promote 42\non_promote 42\non_demote 42\non_promote 42\n" {
		t.Errorf("hooks ran %q", b)
	}
}
