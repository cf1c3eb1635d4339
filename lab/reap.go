package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// ownersDir records, per lab prefix, the process that keeps the lab alive
// and where its directories are, so that a later run can remove a lab whose
// owner died (a test killed by its timeout, a crashed CLI) without a PID
// file of its own to go by.
const ownersDir = "/run/kha-lab/owners"

func (l *Lab) ownerFile() string { return filepath.Join(ownersDir, l.cfg.Prefix) }

// recordOwner names pid as the lab's keeper.
func (l *Lab) recordOwner(pid int) error {
	id, err := proc.Identify(pid)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(ownersDir, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	text := fmt.Sprintf("%d %d\n%s\n%s\n", id.PID, id.Start, l.cfg.StateDir, l.cfg.DataDir)
	if err := os.WriteFile(l.ownerFile(), []byte(text), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

type owner struct {
	id                proc.ID
	stateDir, dataDir string
}

func readOwner(prefix string) (owner, bool) {
	b, err := os.ReadFile(filepath.Join(ownersDir, prefix))
	if err != nil {
		return owner{}, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 3 {
		return owner{}, false
	}
	var o owner
	if _, err := fmt.Sscanf(lines[0], "%d %d", &o.id.PID, &o.id.Start); err != nil {
		return owner{}, false
	}
	o.stateDir, o.dataDir = lines[1], lines[2]
	return o, true
}

// Reap removes every lab whose prefix starts with family and whose owner is
// gone (or unknown): what crashed runs left behind. Labs with a live owner
// are left alone, so concurrent runs do not disturb each other.
func Reap(ctx context.Context, family string) ([]string, error) {
	if family == "" {
		return nil, errors.New("lab: reap needs a prefix family")
	}
	// Every namespace of a lab is PREFIX-HOST; a family covers PREFIX
	// itself and PREFIXsuffix (test labs: khciXXXX).
	prefixes := map[string]bool{}
	all, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("lab: %w", err)
	}
	for _, e := range all {
		if i := strings.LastIndex(e.Name(), "-"); i > 0 && strings.HasPrefix(e.Name(), family) {
			prefixes[e.Name()[:i]] = true
		}
	}
	owners, _ := os.ReadDir(ownersDir)
	for _, e := range owners {
		if strings.HasPrefix(e.Name(), family) {
			prefixes[e.Name()] = true
		}
	}
	var reaped []string
	var errs []error
	for p := range prefixes {
		cfg := Config{Prefix: p}
		if o, ok := readOwner(p); ok {
			if proc.Alive(o.id) {
				continue
			}
			cfg.StateDir, cfg.DataDir = o.stateDir, o.dataDir
		}
		l, err := New(cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := l.Down(ctx); err != nil {
			errs = append(errs, fmt.Errorf("reap %s: %w", p, err))
			continue
		}
		reaped = append(reaped, p)
	}
	return reaped, errors.Join(errs...)
}
