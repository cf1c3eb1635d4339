package main

import (
	"bytes"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// syncBuffer is a log sink the reloader goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

const reloadBase = `node = "m1"
[etcd]
endpoints = ["http://127.0.0.1:2379"]
[log]
level = "info"
[hooks]
on_promote = ["/bin/true"]
`

func loadReloader(t *testing.T, text string) (*reloader, string, *slog.LevelVar, *syncBuffer) {
	t.Helper()
	path := writeConfig(t, text)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	level := new(slog.LevelVar)
	log := newLoggerAt(out, cfg.Log, level)
	return newReloader(cfg, log, level), path, level, out
}

// TestReloadAppliesSafeKeysAndNamesTheOthers: log.level and the hooks change
// in place; a changed lease.ttl (part of the fence window) and units.managed
// are refused by name and keep their values; a file that does not load
// changes nothing.
func TestReloadAppliesSafeKeysAndNamesTheOthers(t *testing.T) {
	rl, path, level, out := loadReloader(t, reloadBase)
	next := strings.Replace(reloadBase, `level = "info"`, `level = "debug"`, 1)
	next = strings.Replace(next, `on_promote = ["/bin/true"]`, "on_promote = [\"/bin/echo\", \"promoted\"]\ntimeout = \"3s\"", 1)
	next += "[lease]\nttl = \"20s\"\n[units]\nmanaged = [\"a.service\"]\n"
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	rl.reload()
	if level.Level() != slog.LevelDebug {
		t.Errorf("log level after reload = %s, want DEBUG", level.Level())
	}
	h := rl.Hooks()
	if !slices.Equal(h.OnPromote, []string{"/bin/echo", "promoted"}) || h.Timeout != 3*time.Second {
		t.Errorf("hooks after reload = %+v", h)
	}
	log := out.String()
	for _, key := range []string{"lease.ttl", "units.managed"} {
		if !strings.Contains(log, "reload: "+key+" changed but cannot change while running") {
			t.Errorf("no refusal naming %s in:\n%s", key, log)
		}
	}
	if strings.Contains(log, "reload: log.level") || strings.Contains(log, "reload: hooks.") {
		t.Errorf("a reloadable key was refused:\n%s", log)
	}

	// Broken file: refused whole, the running values stay.
	if err := os.WriteFile(path, []byte(reloadBase+"[log]\nlevel = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rl.reload()
	if level.Level() != slog.LevelDebug || !strings.Contains(out.String(), "reload refused: the configuration does not load") {
		t.Errorf("a broken file: level %s, log:\n%s", level.Level(), out.String())
	}
}

// TestChangedKeys names keys as the TOML file spells them.
func TestChangedKeys(t *testing.T) {
	a := config.Default()
	b := a
	b.Lease.TTL = time.Minute
	b.Etcd.Endpoints = []string{"https://10.0.0.1:2379"}
	b.Node = "m2"
	b.Path = "/elsewhere" // not a key
	got := changedKeys(a, b)
	if want := []string{"node", "etcd.endpoints", "lease.ttl"}; !slices.Equal(got, want) {
		t.Fatalf("changedKeys = %q, want %q", got, want)
	}
	if got := changedKeys(a, a); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
}

// TestSIGHUPReloadsAndKeepsRunning sends a real SIGHUP to this process the
// way the daemon catches it: without the handler the signal's default
// action would end the process (the test binary) at once.
func TestSIGHUPReloadsAndKeepsRunning(t *testing.T) {
	hup, stop := notifyHUP()
	defer stop()
	rl, path, level, _ := loadReloader(t, reloadBase)
	ctx := t.Context()
	go rl.watch(ctx, hup)
	if err := os.WriteFile(path, []byte(strings.Replace(reloadBase, `level = "info"`, `level = "warn"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for level.Level() != slog.LevelWarn {
		if time.Now().After(deadline) {
			t.Fatalf("log level still %s 30s after SIGHUP", level.Level())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
