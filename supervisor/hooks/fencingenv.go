package hooks

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// FencingEnvPath is where the supervisor publishes the fencing token for the
// managed units' drop-in (EnvironmentFile=-/run/kha-supervisor/fencing.env).
const FencingEnvPath = layout.FencingEnv

// WriteFencingEnv replaces the file at path with KEY=value lines for kv,
// atomically (a unit starting at the same moment sees the old file or the
// new one, never a mix), mode 0644. Keys must be environment variable names;
// values must not contain line breaks or NUL. Values with characters outside
// a conservative set are double-quoted with systemd's (and the shell's)
// escapes, so the file reads the same to EnvironmentFile= and to `. file`.
// A missing parent directory is created with mode 0700 (root reads it).
func WriteFencingEnv(path string, kv map[string]string) error {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by kha-supervisor before the managed units start; do not edit.\n")
	for _, k := range keys {
		v := kv[k]
		if !validName(k) {
			return fmt.Errorf("fencing env %s: key %q is not a valid environment variable name", path, k)
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("fencing env %s: value of %s contains a line break or NUL", path, k)
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(quoteValue(v))
		b.WriteByte('\n')
	}

	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("fencing env: create %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("fencing env: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.WriteString(b.String()); err != nil {
		return fmt.Errorf("fencing env: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("fencing env: chmod %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("fencing env: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("fencing env: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("fencing env: rename to %s: %w", path, err)
	}
	committed = true
	// Make the rename durable where that means anything (not on /run's
	// tmpfs, but the path is configurable in tests and elsewhere).
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil && !errors.Is(err, os.ErrInvalid) {
			return fmt.Errorf("fencing env: sync %s: %w", dir, err)
		}
	}
	return nil
}

// validName accepts [A-Za-z_][A-Za-z0-9_]*.
func validName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// quoteValue leaves plain values bare and double-quotes the rest, escaping
// what systemd's EnvironmentFile= parser and a POSIX shell both unescape
// inside double quotes.
func quoteValue(v string) string {
	plain := v != ""
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.,:/@+=-%", r)) {
			plain = false
			break
		}
	}
	if plain {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		if strings.ContainsRune("\\\"`$", r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}
