package dropin

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Change is one file install-dropins writes or removes.
type Change struct {
	Path   string
	Unit   string
	Text   []byte // nil: remove the file
	Reason string // for removals
}

// Plan lists every file install-dropins writes or removes under dir: the
// managed units' drop-ins (planDropins) and the supervisor unit's own. guard
// and binary are Params' Guard and Binary (at most one set; neither: the
// packaged kha-guard).
func Plan(dir string, cfg config.Config, guard, binary string) ([]Change, error) {
	changes, err := planDropins(dir, cfg.Units.Managed, Params{Guard: guard, Binary: binary, StopTimeout: cfg.Units.StopTimeout})
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
func planSupervisorDropin(dir string, cfg config.Config) (Change, error) {
	text, err := RenderSupervisor(supervisorDropin(cfg))
	if err != nil {
		return Change{}, err
	}
	p := SupervisorPath(dir)
	if old, err := os.ReadFile(p); err == nil && !bytes.HasPrefix(old, []byte(Marker)) {
		return Change{}, fmt.Errorf("%s exists and was not written by kha-supervisor: move it away first (settings of your own belong in a 90-*.conf there)", p)
	}
	return Change{Path: p, Unit: SupervisorUnit, Text: text}, nil
}

// supervisorDropin is what the supervisor unit's drop-in holds for cfg.
func supervisorDropin(cfg config.Config) Supervisor {
	p := cfg.SelectedProfile()
	// The configuration was validated on load, so the budget is valid.
	start, _ := StartTimeout(StartBudgetOf(cfg))
	return Supervisor{Profile: p.Name, Watchdog: p.Watchdog, StartTimeout: start}
}

// planDropins lists the drop-ins to write for units, and the stale ones
// (written by an earlier run for units no longer managed) to remove. It
// refuses to overwrite a file at a drop-in's path that kha-supervisor did not
// write, so an administrator's own file is never lost.
func planDropins(dir string, units []string, each Params) ([]Change, error) {
	var changes []Change
	managed := map[string]bool{}
	for _, u := range units {
		each.Unit = u
		text, err := Render(each)
		if err != nil {
			return nil, err
		}
		p := Path(dir, u)
		if old, err := os.ReadFile(p); err == nil && !bytes.HasPrefix(old, []byte(Marker)) {
			return nil, fmt.Errorf("%s exists and was not written by kha-supervisor: move it away first", p)
		}
		managed[u] = true
		changes = append(changes, Change{Path: p, Unit: u, Text: text})
	}

	found, err := filepath.Glob(filepath.Join(dir, "*.d", FileName))
	if err != nil {
		return nil, fmt.Errorf("look for earlier drop-ins: %w", err)
	}
	sort.Strings(found)
	for _, p := range found {
		unit := strings.TrimSuffix(filepath.Base(filepath.Dir(p)), ".d")
		if managed[unit] || unit == SupervisorUnit {
			continue // the supervisor's own is planned by planSupervisorDropin
		}
		old, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(old, []byte(Marker)) {
			continue // not ours (or unreadable): leave it alone
		}
		changes = append(changes, Change{Path: p, Unit: unit, Reason: "unit no longer in units.managed"})
	}
	return changes, nil
}

// WriteIfChanged writes text to path atomically (temporary file, fsync,
// rename), unless the file already holds exactly text. A half-written
// drop-in must never be what systemd reads.
func WriteIfChanged(path string, text []byte) (bool, error) {
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
