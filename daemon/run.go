// Package daemon is kha-supervisor run: the daemon's wiring of the
// supervisor to systemd, etcd, the guard socket, HTTP, metrics and the fence
// at the API server, and the installed-unit check it shares with
// check-config. cmd/kha-supervisor only parses the command line.
package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

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

// Exit codes of Run. They are part of the interface; cmd/kha-supervisor
// names and documents them with the others (exitCodes).
const (
	ExitOK          = 0 // graceful stop: units stopped, lease released
	ExitFailure     = 1 // runtime failure (etcd or systemd unreachable, I/O error)
	ExitConfig      = 2 // bad configuration; nothing was changed
	ExitFenced      = 3 // lease could not be proven; units stopped; restart as standby
	ExitFenceFailed = 4 // fenced, but a unit could not be confirmed stopped
)

// Options are what the command hands the daemon.
type Options struct {
	Config  config.Config
	Log     *slog.Logger
	Version string              // for the member record and the metrics
	Notify  func(string)        // sd_notify
	Hooks   func() config.Hooks // the hook settings in force (they change on SIGHUP)
}

// Run is the daemon with its collaborators built from the configuration:
// it checks the installed units, reaches systemd and etcd, builds the
// supervisor and serves the guard socket, HTTP and the API fence while the
// supervisor runs, and returns the exit code.
func Run(ctx context.Context, o Options) int {
	cfg, log := o.Config, o.Log
	wd := systemdWatchdog()
	if code := CheckUnitsAtStart(ctx, cfg, wd, log); code != ExitOK {
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
		return ExitFailure
	}
	defer units.Close()

	conns, code := dialEtcd(ctx, cfg, units, log, o.Notify, rejoining(runstate.DefaultDir))
	if conns == nil {
		return code
	}
	defer conns.close()
	if code := etcdFenceAtStart(ctx, conns.cli, cfg, log); code != ExitOK {
		stopManaged(cfg, units, log)
		return code
	}
	m, code := newMetrics(cfg, o.Version, log)
	if m == nil {
		return code
	}
	fence, err := newAPIFence(cfg, etcdState(conns.pool.Hedged(), group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster).Leader(), cfg.Etcd.RequestTimeout), log) // apifence.go; nil when api_fence.mode = off
	if err != nil {
		log.Error("cannot set up the fence at the API server", "err", err)
		return ExitFailure
	}
	defer fence.close()
	resets := newConnResets(ctx, cfg, log)
	sup, code := newSupervisor(cfg, log, supervisor.Options{Client: conns.cli, Units: units, Notify: o.Notify, Watchdog: wd,
		Pool: conns.pool, APIFence: fence.iface(), Hook: hooks.Steps{Hooks: o.Hooks}.Hook, Version: o.Version,
		ResetConnections: resets.fence(cfg.Etcd), ResetConnectionsTo: resets.promote(cfg.Etcd)}, m)
	if sup == nil {
		return code
	}
	stop, code := serve(ctx, cfg, log, sup, conns.cli, m)
	if stop == nil {
		return code
	}
	defer stop()
	fence.start(sup, m.reg, cfg.APIFence)
	go exportGauges(m.ctx, sup, m.metrics, m.group, cfg.Units.Managed)
	return exitCode(sup.Run(ctx), log)
}

// exitCode is Run's code for what the supervisor's Run returned.
func exitCode(err error, log *slog.Logger) int {
	var fe *supervisor.FenceError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &fe) && fe.Incomplete != nil:
		log.Error("exiting after an incomplete fence", "err", err)
		return ExitFenceFailed
	case errors.As(err, &fe):
		log.Error("exiting after fencing; systemd restarts this process as a fresh standby", "reason", fe.Reason)
		return ExitFenced
	default:
		log.Error("supervisor failed", "err", err)
		return ExitFailure
	}
}

// etcdConns are the daemon's etcd clients: the balanced one (history,
// client reads) and the pool of one client per endpoint (leadership).
type etcdConns struct {
	cli         *clientv3.Client
	perEndpoint []*clientv3.Client
	pool        *etcdconn.Pool
}

func (c *etcdConns) close() {
	for _, pc := range c.perEndpoint {
		_ = pc.Close()
	}
	_ = c.cli.Close()
}

// dialEtcd reaches etcd (dialAtStart; rejoin: this process is a restart)
// and checks that every endpoint is of one cluster. On failure the managed
// units are stopped (a node that cannot prove a lease must not run them,
// whatever ran before) and it returns nil and the code.
func dialEtcd(ctx context.Context, cfg config.Config, units fencing.Units, log *slog.Logger, notify func(string), rejoin bool) (*etcdConns, int) {
	cli, code := dialAtStart(ctx, cfg, units, log, notify, rejoin)
	if cli == nil {
		return nil, code
	}
	warnOldEtcd(ctx, cli, log)
	// One renewal client per endpoint; the balanced client joins them only
	// when an endpoint has none (see etcdconn.PerEndpoint).
	c := &etcdConns{cli: cli, perEndpoint: etcdconn.PerEndpoint(cfg.Etcd, log)}
	members := c.perEndpoint
	if len(members) < len(cfg.Etcd.Endpoints) {
		members = append(slices.Clip(members), cli)
	}
	var err error
	if c.pool, err = etcdconn.NewPool(members, etcdconn.PoolOptions{HedgeAfter: etcdconn.HedgeDelay(cfg.Etcd), Log: log}); err != nil {
		log.Error("cannot build the etcd client pool", "err", err)
		c.close()
		return nil, ExitFailure
	}
	vctx, vcancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout+cfg.Etcd.RequestTimeout)
	err = c.pool.Verify(vctx)
	vcancel()
	if err != nil {
		log.Error("etcd.endpoints name members of more than one etcd cluster; stopping managed units and exiting", "err", err, "config", cfg.Path)
		stopManaged(cfg, units, log)
		c.close()
		return nil, ExitConfig
	}
	return c, ExitOK
}

// daemonMetrics are what the daemon registers and serves on /metrics.
type daemonMetrics struct {
	registry *prometheus.Registry  // served on /metrics
	reg      prometheus.Registerer // registry, with the group's labels
	metrics  *httpapi.Metrics
	group    *httpapi.GroupMetrics
	ctx      context.Context // the gauges' exporter and the servers live as long as it
}

func newMetrics(cfg config.Config, version string, log *slog.Logger) (*daemonMetrics, int) {
	m := &daemonMetrics{registry: prometheus.NewRegistry()}
	m.reg = httpapi.WithGroupLabels(m.registry, cfg.Cluster, cfg.Etcd.Prefix)
	var err error
	m.metrics, err = httpapi.NewMetrics(m.reg, httpapi.WithUnits(cfg.Units.Managed...), httpapi.WithVersion(version),
		httpapi.WithEndpoints(cfg.Etcd.Endpoints...))
	if err == nil {
		m.group, err = httpapi.NewGroupMetrics(m.reg)
	}
	if err != nil {
		log.Error("cannot register metrics", "err", err)
		return nil, ExitFailure
	}
	return m, ExitOK
}

// newSupervisor completes o from cfg and builds the supervisor, its
// transitions and renewals counted in m.
func newSupervisor(cfg config.Config, log *slog.Logger, o supervisor.Options, m *daemonMetrics) (*supervisor.Supervisor, int) {
	o.Config, o.Log = cfg, log
	o.RunStateDir, o.FencingEnv = runstate.DefaultDir, hooks.FencingEnvPath
	o.Observer = func(t supervisor.Transition) {
		m.metrics.Transition(string(t.From), string(t.To), t.Kind)
		if t.To == group.Fencing {
			m.metrics.Fenced(t.Kind)
		}
	}
	o.RenewObserver = func(lease, endpoint string, took time.Duration, err error) {
		m.metrics.Renewed(lease, endpoint, took, err)
	}
	sup, err := supervisor.New(o)
	if err != nil {
		log.Error("cannot create supervisor", "err", err)
		return nil, ExitConfig
	}
	if err := m.reg.Register(health.NewCollector(func() []health.Report { return sup.Status().Health })); err != nil {
		log.Error("cannot register metrics", "err", err)
		return nil, ExitFailure
	}
	return sup, ExitOK
}

// serve opens the guard socket and the HTTP endpoint for sup and seeds the
// fence counters; stop closes them. On failure stop is nil.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, sup *supervisor.Supervisor, cli *clientv3.Client, m *daemonMetrics) (stop func(), code int) {
	gsrv, err := guard.Listen(cfg.Guard.Socket)
	if err != nil {
		log.Error("cannot open the guard socket", "path", cfg.Guard.Socket, "err", err)
		return nil, ExitFailure
	}
	gsrv.Logger = log
	gsrv.SetTerm(sup.Term)
	// Off the start-up path: the counters are for people, the history read
	// may take a request timeout.
	note := predecessorFence() // read before Run: its start-up publishes and clears the note
	go func() { m.metrics.SeedFences(pastFences(ctx, cfg, cli, sup.Keys(), note, log)) }()
	gctx, gcancel := context.WithCancel(context.Background())
	m.ctx = gctx
	go func() { _ = gsrv.Serve(gctx) }()
	stops := []func(){gcancel, func() { _ = gsrv.Close() }}
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cfg.HTTP.Listen != "" {
		ln, err := net.Listen("tcp", cfg.HTTP.Listen)
		if err != nil {
			log.Error("cannot listen for HTTP", "listen", cfg.HTTP.Listen, "err", err)
			stop()
			return nil, ExitFailure
		}
		stale := httpapi.WithStaleAfter(3 * cfg.Units.PollInterval)
		hs := &http.Server{Handler: httpapi.New(statusSource{sup}, m.registry, stale), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		stops = append(stops, func() { _ = hs.Close() })
	}
	return stop, ExitOK
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
