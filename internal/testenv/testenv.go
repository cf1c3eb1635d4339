// Package testenv checks what integration tests need. A missing prerequisite
// fails the test: this project never skips, so a green run always means the
// real parts were exercised. `make test` (scripts/deps.sh) installs them.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// RequireRoot fails t unless the test runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this integration test needs root (run `make test` as root); it does not skip")
	}
}

// RequireCommands fails t unless every named program is on PATH.
func RequireCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("this integration test needs %s on PATH (scripts/deps.sh installs it): %v", n, err)
		}
	}
}
