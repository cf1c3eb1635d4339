package hooks

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Steps is the supervisor's hook callback (supervisor.Options.Hook): it
// runs the configured hook for the step by name, with the settings in force.
// fencing.env is not a step: the supervisor's promotion writes it as the
// first of the token's destinations and removes it once the units are down
// (supervisor.Options.FencingEnv).
type Steps struct {
	// Hooks gives the hook settings in force (they change on SIGHUP).
	Hooks func() config.Hooks
}

// Hook runs the hook for name (on_promote, on_demote or on_fence) with env
// (KHA_NODE, KHA_CLUSTER, KHA_ROLE, KHA_FENCING_TOKEN).
func (r Steps) Hook(ctx context.Context, name string, env map[string]string) error {
	cfg := r.Hooks()
	var argv []string
	switch name {
	case "on_promote":
		argv = cfg.OnPromote
	case "on_demote":
		argv = cfg.OnDemote
	case "on_fence":
		argv = cfg.OnFence
	default:
		return fmt.Errorf("hooks: unknown hook %q", name)
	}
	if len(argv) == 0 {
		return nil
	}
	return Run(ctx, name, argv, env, cfg.Timeout)
}

// RemoveFencingEnv removes the file at path; a missing file is not an error.
func RemoveFencingEnv(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fencing env: remove %s: %w", path, err)
	}
	return nil
}
