package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(installDropinsCommand) }

// dropinFlags are install-dropins' options.
type dropinFlags struct {
	dir, binary      string
	dryRun, noReload bool
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
	fs.StringVar(&o.binary, "binary", dropin.DefaultBinary, "absolute `path` of kha-supervisor for the guard in ExecStartPre=")
	_ = c.MarkFlagDirname("dir")
	_ = c.MarkFlagFilename("binary")
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

// dropinChange is one file install-dropins writes or removes.
type dropinChange struct {
	path   string
	unit   string
	text   []byte // nil: remove the file
	reason string // for removals
}

func installDropins(e env, configFile string, o dropinFlags) int {
	cfgPath, dir, dryRun, noReload, binary := &configFile, &o.dir, &o.dryRun, &o.noReload, &o.binary
	if !filepath.IsAbs(*dir) {
		fmt.Fprintf(e.stderr, "install-dropins: --dir %q must be an absolute path\n", *dir)
		return exitConfig
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
		return exitConfig
	}

	changes, err := planInstall(*dir, cfg, *binary)
	if err != nil {
		fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
		return exitConfig
	}

	if *dryRun {
		for _, c := range changes {
			if c.text == nil {
				fmt.Fprintf(e.stdout, "# would remove %s (%s)\n\n", c.path, c.reason)
				continue
			}
			fmt.Fprintf(e.stdout, "# would write %s\n%s\n", c.path, c.text)
		}
		if !*noReload {
			fmt.Fprintln(e.stdout, "# then reload systemd (systemctl daemon-reload)")
		}
		return exitOK
	}

	changed := 0
	for _, c := range changes {
		if c.text == nil {
			if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fmt.Fprintf(e.stderr, "install-dropins: remove %s: %v\n", c.path, err)
				return exitFailure
			}
			_ = os.Remove(filepath.Dir(c.path)) // only succeeds when nothing else is in UNIT.d/
			fmt.Fprintf(e.stdout, "removed %s (%s)\n", c.path, c.reason)
			changed++
			continue
		}
		wrote, err := writeIfChanged(c.path, c.text)
		if err != nil {
			fmt.Fprintf(e.stderr, "install-dropins: %v\n", err)
			return exitFailure
		}
		if wrote {
			fmt.Fprintf(e.stdout, "wrote %s\n", c.path)
			if c.unit == dropin.SupervisorUnit {
				// The running daemon computed its fence window with the
				// watchdog it started under; only a restart makes the two
				// agree again (and applies a changed profile at all).
				fmt.Fprintf(e.stdout, "restart %s for its new settings to take effect\n", dropin.SupervisorUnit)
			}
			changed++
		} else {
			fmt.Fprintf(e.stdout, "unchanged %s\n", c.path)
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

// planInstall lists every file install-dropins writes or removes: the
// managed units' drop-ins (planDropins) and the supervisor unit's own.
func planInstall(dir string, cfg config.Config, binary string) ([]dropinChange, error) {
	changes, err := planDropins(dir, cfg.Units.Managed, binary, cfg.Units.StopTimeout)
	if err != nil {
		return nil, err
	}
	sup, err := planSupervisorDropin(dir, cfg)
	if err != nil {
		return nil, err
	}
	return append(changes, sup), nil
}

// planSupervisorDropin is the supervisor unit's drop-in: the values of
// kha-supervisor.service that the configuration's profile decides (its
// WatchdogSec, which enters the fence window).
func planSupervisorDropin(dir string, cfg config.Config) (dropinChange, error) {
	text, err := dropin.RenderSupervisor(supervisorDropin(cfg))
	if err != nil {
		return dropinChange{}, err
	}
	p := dropin.SupervisorPath(dir)
	if old, err := os.ReadFile(p); err == nil && !bytes.HasPrefix(old, []byte(dropin.Marker)) {
		return dropinChange{}, fmt.Errorf("%s exists and was not written by kha-supervisor: move it away first (settings of your own belong in a 90-*.conf there)", p)
	}
	return dropinChange{path: p, unit: dropin.SupervisorUnit, text: text}, nil
}

// supervisorDropin is what the supervisor unit's drop-in holds for cfg.
func supervisorDropin(cfg config.Config) dropin.Supervisor {
	p := cfg.SelectedProfile()
	// The configuration was validated on load, so the budget is valid.
	start, _ := dropin.StartTimeout(dropin.StartBudgetOf(cfg))
	return dropin.Supervisor{Profile: p.Name, Watchdog: p.Watchdog, StartTimeout: start}
}

// planDropins lists the drop-ins to write for units, and the stale ones
// (written by an earlier run for units no longer managed) to remove. It
// refuses to overwrite a file at a drop-in's path that kha-supervisor did not
// write, so an administrator's own file is never lost.
func planDropins(dir string, units []string, binary string, stop time.Duration) ([]dropinChange, error) {
	var changes []dropinChange
	managed := map[string]bool{}
	for _, u := range units {
		text, err := dropin.Render(dropin.Params{Unit: u, Binary: binary, StopTimeout: stop})
		if err != nil {
			return nil, err
		}
		p := dropin.Path(dir, u)
		if old, err := os.ReadFile(p); err == nil && !bytes.HasPrefix(old, []byte(dropin.Marker)) {
			return nil, fmt.Errorf("%s exists and was not written by kha-supervisor: move it away first", p)
		}
		managed[u] = true
		changes = append(changes, dropinChange{path: p, unit: u, text: text})
	}

	found, err := filepath.Glob(filepath.Join(dir, "*.d", dropin.FileName))
	if err != nil {
		return nil, fmt.Errorf("look for earlier drop-ins: %w", err)
	}
	sort.Strings(found)
	for _, p := range found {
		unit := strings.TrimSuffix(filepath.Base(filepath.Dir(p)), ".d")
		if managed[unit] || unit == dropin.SupervisorUnit {
			continue // the supervisor's own is planned by planSupervisorDropin
		}
		old, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(old, []byte(dropin.Marker)) {
			continue // not ours (or unreadable): leave it alone
		}
		changes = append(changes, dropinChange{path: p, unit: unit, reason: "unit no longer in units.managed"})
	}
	return changes, nil
}

// writeIfChanged writes text to path atomically (temporary file, fsync,
// rename), unless the file already holds exactly text. A half-written
// drop-in must never be what systemd reads.
func writeIfChanged(path string, text []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, text) {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err := f.Write(text); err != nil {
		f.Close()
		return false, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return false, fmt.Errorf("chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("install %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return true, nil
}
