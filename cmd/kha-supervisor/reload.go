package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// reloadable are the keys SIGHUP applies to a running daemon. Each is read
// afresh where it is used (the log level through a slog.LevelVar, the hooks
// each time one runs), and none takes part in the fence window or the
// election: changing them cannot make this node hold, lose or misjudge the
// lease. Everything else needs a restart (`systemctl restart
// kha-supervisor`, which hands the role over cleanly).
var reloadable = []string{"log.level", "hooks.on_promote", "hooks.on_demote", "hooks.on_fence", "hooks.timeout"}

// reloader owns the live values of the reloadable keys.
type reloader struct {
	path  string
	log   *slog.Logger
	level *slog.LevelVar

	mu    sync.Mutex
	cur   config.Config // the configuration as last applied (or refused in part)
	hooks config.Hooks
}

func newReloader(cfg config.Config, log *slog.Logger, level *slog.LevelVar) *reloader {
	return &reloader{path: cfg.Path, log: log, level: level, cur: cfg, hooks: cfg.Hooks}
}

// Hooks returns the hook settings in force.
func (r *reloader) Hooks() config.Hooks {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hooks
}

// watch reloads on every SIGHUP until ctx ends. Without it SIGHUP's default
// action would kill the daemon without a release.
func (r *reloader) watch(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reload()
		}
	}
}

// reload re-reads the file. A file that does not load changes nothing; of
// one that does, the reloadable keys are applied and every other changed
// key is named in a refusal and keeps its running value.
func (r *reloader) reload() {
	next, err := config.Load(r.path)
	if err != nil {
		r.log.Error("reload refused: the configuration does not load; nothing changed", "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := changedKeys(r.cur, next)
	var applied, refused []string
	for _, k := range changed {
		if slices.Contains(reloadable, k) {
			applied = append(applied, k)
		} else {
			refused = append(refused, k)
		}
	}
	for _, k := range refused {
		r.log.Warn("reload: "+k+" changed but cannot change while running; restart kha-supervisor to apply it",
			"key", k, "config", r.path)
	}
	if len(applied) > 0 {
		_ = r.level.UnmarshalText([]byte(next.Log.Level))
		r.hooks.OnPromote, r.hooks.OnDemote, r.hooks.OnFence = next.Hooks.OnPromote, next.Hooks.OnDemote, next.Hooks.OnFence
		r.hooks.Timeout = next.Hooks.Timeout
		r.cur.Log.Level = next.Log.Level
		r.cur.Hooks = r.hooks
	}
	r.log.Info("configuration reloaded", "config", r.path, "applied", strings.Join(applied, ","),
		"refused", strings.Join(refused, ","))
}

// changedKeys lists the TOML keys (e.g. "lease.ttl") whose values differ.
func changedKeys(a, b config.Config) []string {
	var out []string
	diffStruct(reflect.ValueOf(a), reflect.ValueOf(b), "", &out)
	return out
}

func diffStruct(a, b reflect.Value, prefix string, out *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fa, fb := a.Field(i), b.Field(i)
		if fa.Kind() == reflect.Struct { // a table
			diffStruct(fa, fb, prefix+name+".", out)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			*out = append(*out, prefix+name)
		}
	}
}

// notifyHUP starts catching SIGHUP. Call it before anything slow, so that a
// reload sent during start-up is queued, not fatal.
func notifyHUP() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch, func() { signal.Stop(ch) }
}
