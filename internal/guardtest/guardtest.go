// Package guardtest runs a real guard server for tests of the programs that
// ask it (kha-guard, kha-supervisor guard).
package guardtest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
)

// Serve runs a guard server on sock answering from st until the test ends.
func Serve(t testing.TB, sock string, st guard.Status) {
	t.Helper()
	srv, err := guard.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv.SetStatus(func() guard.Status { return st })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// Config writes a configuration file whose guard.socket is sock and returns
// its path.
func Config(t testing.TB, sock string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte("node = \"m2\"\n[guard]\nsocket = \""+sock+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Token is the term Group's guards name.
const Token = 1234

// Group serves the guards of a two-node group, m1 leading with its units
// allowed and m2 on standby, and returns a configuration file for each.
func Group(t testing.TB) (leaderConfig, standbyConfig string) {
	t.Helper()
	dir := t.TempDir()
	leader := filepath.Join(dir, "leader", "guard.sock")
	standby := filepath.Join(dir, "standby", "guard.sock")
	Serve(t, leader, guard.Status{Node: "m1", State: "active", Leader: "m1", Token: Token,
		UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: 3 * time.Second})
	Serve(t, standby, guard.Status{Node: "m2", State: "standby", Leader: "m1", Token: Token, StopMax: 3 * time.Second})
	return Config(t, leader), Config(t, standby)
}
