package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
	"github.com/kha-supervisor/kha-supervisor/supervisor/hooks"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
	"github.com/kha-supervisor/kha-supervisor/supervisor/timesync"
)

func runDaemon(e env, path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	log := newLogger(e, cfg.Log)
	slog.SetDefault(log)
	for _, w := range cfg.Warnings() {
		log.Warn("configuration accepted with a warning", "warning", w, "file", path)
	}
	daemonGC()
	// Before anything slow: SIGHUP's default action would end the daemon.
	hup, stopHUP := notifyHUP()
	defer stopHUP()
	rl := newReloader(cfg, log, &logLevel)
	go rl.watch(e.ctx, hup)
	return run(e.ctx, cfg, log, sdNotify, rl.Hooks)
}

// daemonGCPercent is the daemon's GOGC unless the environment sets one.
// Its live heap is a few MB; the default 100 lets garbage double it. With
// the API gates serving the components' watches, the leader's RSS was
// 42 MB at 100 and 39-40 MB at 50 in a debugging build, 37 MiB at 50 in
// the package's (kha-lab cost, docs/architecture.md), for a fraction of a
// percent of a core more GC.
const daemonGCPercent = 50

func daemonGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
}

// sdNotify sends to systemd's notify socket. unsetEnvironment is false: true
// would silence every later call.
func sdNotify(msg string) { _, _ = daemon.SdNotify(false, msg) }

// run is the daemon with its collaborators built from the configuration.
// hooksNow returns the hook settings in force (they change on SIGHUP).
func run(ctx context.Context, cfg config.Config, log *slog.Logger, notify func(string), hooksNow func() config.Hooks) int {
	wd := systemdWatchdog()
	if code := checkUnitsAtStart(ctx, cfg, wd, log); code != exitOK {
		return code
	}
	warnClockSlew(cfg, log)
	// This process holds nothing yet: a fencing.env left by a predecessor
	// (the run directory survives a restart) must not outlive its term.
	if err := hooks.RemoveFencingEnv(hooks.FencingEnvPath); err != nil {
		log.Warn("cannot remove a leftover fencing.env", "err", err)
	}

	// systemd first: if it cannot be reached nothing can be stopped, so
	// nothing may be started either. As root over its private socket, so
	// that a stuck dbus-daemon cannot hold up a fence.
	units, err := systemd.Open(context.Background(), systemd.Host(log))
	if err != nil {
		log.Error("cannot reach systemd over D-Bus", "err", err)
		return exitFailure
	}
	defer units.Close()

	dctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout+cfg.Etcd.RequestTimeout)
	cli, err := etcdconn.Dial(dctx, cfg.Etcd)
	cancel()
	if err != nil {
		// Keep the units stopped while etcd is unreachable: a node that
		// cannot prove a lease must not run them, whatever ran before.
		code := exitFailure
		if errors.Is(err, etcdconn.ErrForeignCluster) {
			// A configuration error, but the units still stop: nothing
			// can be proven through endpoints of two clusters.
			code = exitConfig
			log.Error("etcd.endpoints name members of more than one etcd cluster; stopping managed units and exiting", "err", err, "config", cfg.Path)
		} else {
			log.Error("cannot reach etcd; stopping managed units and exiting", "err", err)
		}
		stopManaged(cfg, units, log)
		return code
	}
	defer cli.Close()
	warnOldEtcd(ctx, cli, log)
	// One renewal client per endpoint; the balanced client joins them only
	// when an endpoint has none (see etcdconn.PerEndpoint).
	perEndpoint := etcdconn.PerEndpoint(cfg.Etcd, log)
	defer func() {
		for _, c := range perEndpoint {
			_ = c.Close()
		}
	}()
	members := perEndpoint
	if len(members) < len(cfg.Etcd.Endpoints) {
		members = append(slices.Clip(members), cli)
	}
	pool, err := etcdconn.NewPool(members, etcdconn.PoolOptions{HedgeAfter: etcdconn.HedgeDelay(cfg.Etcd), Log: log})
	if err != nil {
		log.Error("cannot build the etcd client pool", "err", err)
		return exitFailure
	}
	vctx, vcancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout+cfg.Etcd.RequestTimeout)
	err = pool.Verify(vctx)
	vcancel()
	if err != nil {
		log.Error("etcd.endpoints name members of more than one etcd cluster; stopping managed units and exiting", "err", err, "config", cfg.Path)
		stopManaged(cfg, units, log)
		return exitConfig
	}

	registry := prometheus.NewRegistry() // served on /metrics
	reg := httpapi.WithGroupLabels(registry, cfg.Cluster, cfg.Etcd.Prefix)
	metrics, err := httpapi.NewMetrics(reg, httpapi.WithUnits(cfg.Units.Managed...), httpapi.WithVersion(version),
		httpapi.WithEndpoints(cfg.Etcd.Endpoints...))
	if err != nil {
		log.Error("cannot register metrics", "err", err)
		return exitFailure
	}
	gm, err := httpapi.NewGroupMetrics(reg)
	if err != nil {
		log.Error("cannot register metrics", "err", err)
		return exitFailure
	}
	fence, err := newAPIFence(cfg, etcdState(pool.Hedged(), group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster).Leader(), cfg.Etcd.RequestTimeout), log) // apifence.go; nil when api_fence.mode = off
	if err != nil {
		log.Error("cannot set up the fence at the API server", "err", err)
		return exitFailure
	}
	defer fence.close()
	sup, err := supervisor.New(supervisor.Options{
		Config: cfg, Client: cli, Units: units, Log: log, Version: version, Notify: notify, Watchdog: wd,
		Pool: pool, APIFence: fence.iface(), RunStateDir: runstate.DefaultDir,
		Hook: hooks.Steps{Hooks: hooksNow}.Hook, FencingEnv: hooks.FencingEnvPath,
		Observer: func(t supervisor.Transition) {
			metrics.Transition(string(t.From), string(t.To), t.Kind)
			if t.To == group.Fencing {
				metrics.Fenced(t.Kind)
			}
		},
		RenewObserver: func(lease, endpoint string, took time.Duration, err error) {
			metrics.Renewed(lease, endpoint, took, err)
		},
	})
	if err != nil {
		log.Error("cannot create supervisor", "err", err)
		return exitConfig
	}
	if err := reg.Register(health.NewCollector(func() []health.Report { return sup.Status().Health })); err != nil {
		log.Error("cannot register metrics", "err", err)
		return exitFailure
	}

	gsrv, err := guard.Listen(cfg.Guard.Socket)
	if err != nil {
		log.Error("cannot open the guard socket", "path", cfg.Guard.Socket, "err", err)
		return exitFailure
	}
	gsrv.Logger = log
	gsrv.SetTerm(sup.Term)
	// Off the start-up path: the counters are for people, the history read
	// may take a request timeout.
	note := predecessorFence() // read before Run: its start-up publishes and clears the note
	go func() { metrics.SeedFences(pastFences(ctx, cfg, cli, sup.Keys(), note, log)) }()
	gctx, gcancel := context.WithCancel(context.Background())
	defer gcancel()
	go func() { _ = gsrv.Serve(gctx) }()
	defer gsrv.Close()

	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			log.Error("cannot listen for HTTP", "listen", cfg.HTTP.Listen, "err", err)
			return exitFailure
		}
		stale := httpapi.WithStaleAfter(3 * cfg.Units.PollInterval)
		hs := &http.Server{Handler: httpapi.New(statusSource{sup}, registry, stale), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}

	fence.start(sup, reg, cfg.APIFence)
	go exportGauges(gctx, sup, metrics, gm, cfg.Units.Managed)
	err = sup.Run(ctx)
	var fe *supervisor.FenceError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &fe) && fe.Incomplete != nil:
		log.Error("exiting after an incomplete fence", "err", err)
		return exitFenceFailed
	case errors.As(err, &fe):
		log.Error("exiting after fencing; systemd restarts this process as a fresh standby", "reason", fe.Reason)
		return exitFenced
	default:
		log.Error("supervisor failed", "err", err)
		return exitFailure
	}
}

// stopManaged keeps the units stopped when the daemon exits before its
// loop: a node that cannot prove a lease must not run them.
func stopManaged(cfg config.Config, units fencing.Units, log *slog.Logger) {
	sctx, scancel := context.WithTimeout(context.Background(), time.Duration(len(cfg.Units.Managed))*cfg.Timeouts().StopMax()+time.Second)
	defer scancel()
	if err := fencing.StopAll(sctx, units, cfg.Units.Managed, cfg.Timeouts()); err != nil {
		log.Error("stopping managed units", "err", err)
	}
}

// systemdWatchdog is WatchdogSec as systemd passes it (WATCHDOG_USEC, for
// this process: WATCHDOG_PID, when set, must be ours), or 0.
func systemdWatchdog() time.Duration {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	if err != nil || usec <= 0 {
		return 0
	}
	return time.Duration(usec) * time.Microsecond
}

// warnClockSlew warns when the local time daemon may slew the clock faster
// than lease.clock_rate_error: etcd times leases on that clock (see
// supervisor/timesync).
func warnClockSlew(cfg config.Config, log *slog.Logger) {
	ds, err := timesync.Find(os.DirFS("/"))
	if err != nil {
		log.Warn("cannot read the time daemon's configuration", "err", err)
		return
	}
	for _, w := range timesync.Warnings(ds, cfg.Lease.ClockRate) {
		log.Warn(w)
	}
}

// warnOldEtcd warns when a cluster member runs an etcd with known lease
// bugs (a stuck old leader could revoke or renew leases wrongly).
func warnOldEtcd(ctx context.Context, cli etcdconn.Client, log *slog.Logger) {
	vctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := etcdconn.ServerVersion(vctx, cli)
	if err != nil {
		log.Warn("cannot read the etcd server version", "err", err)
		return
	}
	if !etcdconn.LeaseSafeVersion(v) {
		log.Warn("etcd is older than v3.5.13 / v3.4.31, whose leases can be mis-revoked or mis-renewed by a stuck leader; upgrade etcd", "version", v)
	}
}

// statusSource adapts the supervisor to the HTTP endpoint.
type statusSource struct{ sup *supervisor.Supervisor }

func (s statusSource) Status() any         { return s.sup.Status() }
func (s statusSource) Active() bool        { return s.sup.Status().Active() }
func (s statusSource) LastTick() time.Time { return s.sup.Status().LastTick }
func (s statusSource) Standby() bool       { return s.sup.Status().State == group.Standby }
func (s statusSource) Warnings() []string  { return s.sup.Status().Warnings() }
func (s statusSource) Problems() []string  { return s.sup.Status().DropinProblems }

// exportProblems sets the drop-in and stray-process gauges of every managed
// unit from the last checks; strays found by a units.processes name (no unit
// known) count under the label "units.processes".
func exportProblems(m *httpapi.Metrics, units []string, st supervisor.Status) {
	strays := map[string]int{}
	for _, p := range st.Strays {
		u := p.Unit
		if u == "" {
			u = "units.processes"
		}
		strays[u]++
	}
	for _, u := range units {
		bad := false
		for _, p := range st.DropinProblems {
			bad = bad || strings.HasPrefix(p, u+":")
		}
		m.SetDropinMismatch(u, bad)
		m.SetStrayProcesses(u, strays[u])
	}
	m.SetStrayProcesses("units.processes", strays["units.processes"])
}

// exportGauges copies the lease and unit figures into the gauges. Only the
// metrics depend on this ticker; nothing safety-related does.
func exportGauges(ctx context.Context, sup *supervisor.Supervisor, m *httpapi.Metrics, g *httpapi.GroupMetrics, cfgUnits []string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := sup.Status()
		m.SetLease(st.LeaseLeft, st.FenceIn, st.State.Holding())
		g.Set(len(st.ConfigMismatch), len(st.MissingPeers), len(st.Eligible))
		for _, u := range st.Units {
			m.SetUnitActive(u.Name, u.Running())
		}
		exportProblems(m, cfgUnits, st)
		if x := st.ExecWatch; x != nil {
			m.SetExecWatch(x.Mode == "kernel", x.Kills, x.LastExecToKill)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pastFences are this node's fences before this process: from the history
// in etcd, and the run state a fenced predecessor left (its successor, this
// process, publishes that note to history only after start-up).
func pastFences(ctx context.Context, cfg config.Config, cli *clientv3.Client, keys group.Keys, note *runstate.Fenced, log *slog.Logger) []httpapi.PastFence {
	var out []httpapi.PastFence
	seen := map[time.Time]bool{}
	hctx, cancel := context.WithTimeout(ctx, cfg.Etcd.RequestTimeout)
	evs, err := group.ReadHistory(hctx, cli, keys, 0)
	cancel()
	if err != nil {
		log.Warn("cannot read the history for the fence metrics; they count from this start", "err", err)
	}
	for _, e := range evs {
		if e.Node == cfg.Node && e.To == group.Fenced {
			out = append(out, httpapi.PastFence{At: e.At, Reason: e.Kind})
			seen[e.At.UTC()] = true
		}
	}
	if note != nil && !seen[note.At.UTC()] {
		out = append(out, httpapi.PastFence{At: note.At, Reason: note.Kind})
	}
	return out
}

// predecessorFence is the fence note a fenced predecessor left, if any.
func predecessorFence() *runstate.Fenced {
	st, ok, err := runstate.Store{Dir: runstate.DefaultDir}.Load()
	if err != nil || !ok {
		return nil
	}
	return st.Fenced
}
