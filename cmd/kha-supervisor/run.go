package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
	"github.com/kha-supervisor/kha-supervisor/supervisor/hooks"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

func init() {
	register("run", "run the supervisor (the daemon; what kha-supervisor.service starts)", runDaemon)
}

func runDaemon(e env, args []string) int {
	cfg, code := loadConfig(e, flag.NewFlagSet("run", flag.ContinueOnError), args)
	if code != exitOK {
		return code
	}
	log := newLogger(e, cfg.Log)
	slog.SetDefault(log)
	return run(e.ctx, cfg, log, sdNotify)
}

// sdNotify sends to systemd's notify socket. unsetEnvironment is false: true
// would silence every later call.
func sdNotify(msg string) { _, _ = daemon.SdNotify(false, msg) }

func newLogger(e env, c config.Log) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level)) // validated by config.Load
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(e.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(e.stderr, opts))
}

// run is the daemon with its collaborators built from the configuration.
func run(ctx context.Context, cfg config.Config, log *slog.Logger, notify func(string)) int {
	wd := systemdWatchdog()
	if w := cfg.Window(); wd > 0 {
		w.Watchdog = wd
		if err := w.Validate(cfg.Lease.RenewInterval.D()); err != nil {
			log.Error("systemd's watchdog leaves no room for renewals: lower WatchdogSec in a drop-in for kha-supervisor.service, or lengthen lease.ttl",
				"err", err, "config", cfg.Path)
			return exitConfig
		}
		log.Info("fence window", "span", w.Span(w.TTL), "watchdog", wd)
	}

	// systemd first: if D-Bus is not there nothing can be stopped, so
	// nothing may be started either.
	units, err := fencing.NewSystemd(context.Background(), "", log)
	if err != nil {
		log.Error("cannot reach systemd over D-Bus", "err", err)
		return exitFailure
	}
	defer units.Close()

	dctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout.D()+cfg.Etcd.RequestTimeout.D())
	cli, err := etcdconn.Dial(dctx, cfg.Etcd)
	cancel()
	if err != nil {
		// Keep the units stopped while etcd is unreachable: a node that
		// cannot prove a lease must not run them, whatever ran before.
		log.Error("cannot reach etcd; stopping managed units and exiting", "err", err)
		sctx, scancel := context.WithTimeout(context.Background(), time.Duration(len(cfg.Units.Managed))*cfg.Timeouts().StopMax()+time.Second)
		if serr := fencing.StopAll(sctx, units, cfg.Units.Managed, cfg.Timeouts()); serr != nil {
			log.Error("stopping managed units", "err", serr)
		}
		scancel()
		return exitFailure
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
	renew := perEndpoint
	if len(renew) < len(cfg.Etcd.Endpoints) {
		renew = append(slices.Clip(renew), cli)
	}

	reg := prometheus.NewRegistry()
	metrics, err := httpapi.NewMetrics(reg)
	if err != nil {
		log.Error("cannot register metrics", "err", err)
		return exitFailure
	}
	hookCfg := cfg.Hooks
	sup, err := supervisor.New(supervisor.Options{
		Config: cfg, Client: cli, Units: units, Log: log, Version: version, Notify: notify, Watchdog: wd,
		RenewClients: renew, RunStateDir: runstate.DefaultDir,
		Hook: func(ctx context.Context, name string, env map[string]string) error {
			var argv []string
			switch name {
			case "on_promote":
				argv = hookCfg.OnPromote
			case "on_demote":
				argv = hookCfg.OnDemote
			case "on_fence":
				argv = hookCfg.OnFence
			}
			if name == "on_promote" {
				// The units' drop-in reads the token from here.
				if err := hooks.WriteFencingEnv(hooks.FencingEnvPath, map[string]string{
					"KHA_NODE": env["KHA_NODE"], "KHA_CLUSTER": env["KHA_CLUSTER"], "KHA_FENCING_TOKEN": env["KHA_FENCING_TOKEN"],
				}); err != nil {
					return fmt.Errorf("write %s: %w", hooks.FencingEnvPath, err)
				}
			}
			if len(argv) == 0 {
				return nil
			}
			return hooks.Run(ctx, name, argv, env, hookCfg.Timeout.D())
		},
		Observer: func(t supervisor.Transition) {
			metrics.Transition(string(t.From), string(t.To), t.Kind)
			if t.To == supervisor.Fencing {
				metrics.Fenced(t.Kind)
			}
		},
		RenewObserver: func(_ string, took time.Duration, err error) { metrics.Renewed(took, err) },
	})
	if err != nil {
		log.Error("cannot create supervisor", "err", err)
		return exitConfig
	}

	gsrv, err := guard.Listen(cfg.Guard.Socket)
	if err != nil {
		log.Error("cannot open the guard socket", "path", cfg.Guard.Socket, "err", err)
		return exitFailure
	}
	gsrv.Logger = log
	gsrv.SetStatus(func() guard.Status { return guardStatus(sup.Status()) })
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
		stale := httpapi.WithStaleAfter(3 * cfg.Units.PollInterval.D())
		hs := &http.Server{Handler: httpapi.New(statusSource{sup}, reg, stale), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer hs.Close()
	}

	go exportGauges(gctx, sup, metrics)
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

func guardStatus(st supervisor.Status) guard.Status {
	g := guard.Status{
		Node: st.Node, Cluster: st.Cluster, State: string(st.State),
		Leader: st.Leader, Token: st.LeaderToken,
		UnitsAllowed: st.UnitsAllowed, LeaseLeft: st.LeaseLeft, StopMax: st.StopMax,
	}
	if st.Token != 0 {
		g.Leader, g.Token = st.Node, st.Token
	}
	return g
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

// exportGauges copies the lease and unit figures into the gauges. Only the
// metrics depend on this ticker; nothing safety-related does.
func exportGauges(ctx context.Context, sup *supervisor.Supervisor, m *httpapi.Metrics) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		st := sup.Status()
		m.SetLease(st.LeaseLeft, st.FenceIn)
		for _, u := range st.Units {
			m.SetUnitActive(u.Name, u.Running())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
