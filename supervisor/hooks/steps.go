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
// keeps fencing.env in step with the term and runs the configured hook.
//
// fencing.env exists exactly while this node may run the units: it is
// written on promotion, before on_promote runs and before any unit starts,
// and removed on demotion and on fencing, which call their hooks only once
// the units are confirmed stopped. A standby therefore never has one (the
// daemon also removes a leftover at start-up, RemoveFencingEnv).
type Steps struct {
	// Hooks gives the hook settings in force (they change on SIGHUP).
	Hooks func() config.Hooks
	// FencingEnv is the file's path; FencingEnvPath in the daemon.
	FencingEnv string
}

// Hook runs the step for name (on_promote, on_demote or on_fence) with env
// (KHA_NODE, KHA_CLUSTER, KHA_ROLE, KHA_FENCING_TOKEN).
func (r Steps) Hook(ctx context.Context, name string, env map[string]string) error {
	cfg := r.Hooks()
	var argv []string
	switch name {
	case "on_promote":
		argv = cfg.OnPromote
		// The units' drop-in reads the token from here.
		if err := WriteFencingEnv(r.FencingEnv, map[string]string{
			"KHA_NODE": env["KHA_NODE"], "KHA_CLUSTER": env["KHA_CLUSTER"], "KHA_FENCING_TOKEN": env["KHA_FENCING_TOKEN"],
		}); err != nil {
			return fmt.Errorf("write %s: %w", r.FencingEnv, err)
		}
	case "on_demote", "on_fence":
		if name == "on_demote" {
			argv = cfg.OnDemote
		} else {
			argv = cfg.OnFence
		}
		// Not fatal: the units are down already, and the next promotion
		// replaces the file before anything starts.
		_ = RemoveFencingEnv(r.FencingEnv)
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
