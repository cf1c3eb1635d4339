package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(installDropinsCommand) }

// dropinFlags are install-dropins' options.
type dropinFlags struct {
	dir, guard, binary string
	dryRun, noReload   bool
}

func installDropinsCommand(e env) *cobra.Command {
	var o dropinFlags
	c := &cobra.Command{
		Use:     "install-dropins",
		GroupID: groupNode,
		Short:   "write the systemd drop-ins that bind the managed units to the supervisor",
		Long: `Write the drop-in DIR/UNIT.d/` + dropin.FileName + ` for every unit in units.managed and for kha-supervisor.service itself (the profile's WatchdogSec), remove the ones it wrote earlier for units no longer managed, and reload systemd (daemon-reload over D-Bus) if anything changed.
A file at that path that it did not write is never overwritten: the command refuses instead. The packages already ship these drop-ins for the default units; run this command when units.managed, units.stop_timeout or the profile differ from the defaults.`,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(installDropins(e, nodeConfigPath(e, c), o))
		},
	}
	fs := c.Flags()
	fs.StringVar(&o.dir, "dir", "/etc/systemd/system", "systemd unit `directory` to write the drop-ins into (it takes precedence over the packaged ones in /usr/lib/systemd/system)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the files and their paths, and what would be removed; change nothing")
	fs.BoolVar(&o.noReload, "no-reload", false, "do not run daemon-reload afterwards (image builds, chroots)")
	fs.StringVar(&o.guard, "guard", "", "absolute `path` of kha-guard, the check in ExecStartPre= (empty: "+dropin.DefaultGuard+")")
	fs.StringVar(&o.binary, "binary", "", "absolute `path` of a kha-supervisor whose `guard` subcommand ExecStartPre= runs instead of kha-guard (the same check, a slower start)")
	_ = c.MarkFlagDirname("dir")
	_ = c.MarkFlagFilename("guard")
	_ = c.MarkFlagFilename("binary")
	c.MarkFlagsMutuallyExclusive("guard", "binary")
	return c
}

// reloadSystemd makes systemd re-read unit files (daemon-reload). A variable
// so that tests, which have no systemd to talk to, can observe the call.
var reloadSystemd = func(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	// Connecting (authentication, Hello) does not honour ctx in go-systemd,
	// so the whole exchange runs aside and is abandoned on timeout: a CLI
	// must not hang on a wedged bus.
	done := make(chan error, 1)
	go func() {
		conn, err := sd.NewSystemConnectionContext(ctx)
		if err != nil {
			done <- fmt.Errorf("connect to the system bus: %w", err)
			return
		}
		defer conn.Close()
		if err := conn.ReloadContext(ctx); err != nil {
			done <- fmt.Errorf("daemon-reload: %w", err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("daemon-reload: %w", ctx.Err())
	}
}

func installDropins(e env, configFile string, o dropinFlags) int {
	cfgPath, dir, dryRun, noReload := &configFile, &o.dir, &o.dryRun, &o.noReload
	if !filepath.IsAbs(*dir) {
		fmt.Fprintf(e.stderr, "install-dropins: --dir %q must be an absolute path\n", *dir)
		return exitConfig
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
		return exitConfig
	}

	changes, err := dropin.Plan(*dir, cfg, o.guard, o.binary)
	if err != nil {
		fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
		return exitConfig
	}

	if *dryRun {
		for _, c := range changes {
			if c.Text == nil {
				fmt.Fprintf(e.stdout, "# would remove %s (%s)\n\n", c.Path, c.Reason)
				continue
			}
			fmt.Fprintf(e.stdout, "# would write %s\n%s\n", c.Path, c.Text)
		}
		if !*noReload {
			fmt.Fprintln(e.stdout, "# then reload systemd (systemctl daemon-reload)")
		}
		return exitOK
	}

	changed := 0
	for _, c := range changes {
		if c.Text == nil {
			if err := os.Remove(c.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(e.stderr, "install-dropins: remove %s: %v\n", c.Path, err)
				return exitFailure
			}
			_ = os.Remove(filepath.Dir(c.Path)) // only succeeds when nothing else is in UNIT.d/
			fmt.Fprintf(e.stdout, "removed %s (%s)\n", c.Path, c.Reason)
			changed++
			continue
		}
		wrote, err := dropin.WriteIfChanged(c.Path, c.Text)
		if err != nil {
			fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
			return exitFailure
		}
		if wrote {
			fmt.Fprintf(e.stdout, "wrote %s\n", c.Path)
			if c.Unit == dropin.SupervisorUnit {
				// The running daemon computed its fence window with the
				// watchdog it started under; only a restart makes the two
				// agree again (and applies a changed profile at all).
				fmt.Fprintf(e.stdout, "restart %s for its new settings to take effect\n", dropin.SupervisorUnit)
			}
			changed++
		} else {
			fmt.Fprintf(e.stdout, "unchanged %s\n", c.Path)
		}
	}

	switch {
	case *noReload:
		if changed > 0 {
			fmt.Fprintln(e.stdout, "not reloading systemd (--no-reload): run systemctl daemon-reload before the next start")
		}
	case changed == 0:
		fmt.Fprintln(e.stdout, "nothing changed; systemd not reloaded")
	default:
		if err := reloadSystemd(e.ctx); err != nil {
			fmt.Fprintf(e.stderr, "install-dropins: the drop-ins are written, but reloading systemd failed: %v\n", err)
			fmt.Fprintln(e.stderr, "install-dropins: run systemctl daemon-reload")
			return exitFailure
		}
		fmt.Fprintln(e.stdout, "systemd reloaded")
	}
	return exitOK
}
