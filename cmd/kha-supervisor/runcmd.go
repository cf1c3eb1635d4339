package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"

	sdaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(runCommand) }

func runCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:     "run",
		GroupID: groupNode,
		Short:   "run the supervisor (the daemon; what kha-supervisor.service starts)",
		Long: `Run the supervisor in the foreground; this is what kha-supervisor.service starts.
It reads the configuration, stops any managed unit it finds running (this node holds nothing yet), tells systemd it is ready, and then campaigns. It sends READY=1 after that first reconcile, STATUS= on every transition (for example "standby; leader m2, token 1234" or "active; lease valid 6.1s"), WATCHDOG=1 from its reconcile loop, and STOPPING=1 on SIGTERM.
SIGTERM (or SIGINT) is a graceful stop: the units are stopped in reverse order, then the lease is released, so that another node takes over at once; the exit status is then 0. A fenced supervisor exits 3 (4 if a unit could not be confirmed stopped) and systemd restarts it as a standby.`,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(runDaemon(e, configPath(c)))
		},
	}
}

// runDaemon is `kha-supervisor run`: the configuration, the logger and
// SIGHUP's reloader here, the daemon itself in package daemon.
func runDaemon(e env, path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	log := newLogger(e, cfg.Log)
	slog.SetDefault(log)
	for _, w := range slices.Concat(cfg.Warnings(), cfg.StackedWarnings(isLocalHost)) {
		log.Warn("configuration accepted with a warning", "warning", w, "file", path)
	}
	daemonGC()
	// Before anything slow: SIGHUP's default action would end the daemon.
	hup, stopHUP := notifyHUP()
	defer stopHUP()
	rl := newReloader(cfg, log, &logLevel)
	go rl.watch(e.ctx, hup)
	return daemon.Run(e.ctx, daemon.Options{Config: cfg, Log: log, Version: version, Notify: sdNotify, Hooks: rl.Hooks})
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
func sdNotify(msg string) { _, _ = sdaemon.SdNotify(false, msg) }

// configPath is -c, or the packaged path.
// nodeConfigPath is configPath for the operator's node commands
// (check-config, install-dropins, install-kubeconfig, api-fence): without
// -c, KHA_CONFIG names the file, as for the client commands. run and guard
// ignore KHA_CONFIG: what the daemon reads is its unit's command line.
func nodeConfigPath(e env, c *cobra.Command) string {
	if p, _ := c.Flags().GetString("config"); p == "" {
		if p = e.env("KHA_CONFIG"); p != "" {
			return p
		}
	}
	return configPath(c)
}

func configPath(c *cobra.Command) string {
	if p, _ := c.Flags().GetString("config"); p != "" {
		return p
	}
	return config.DefaultPath
}
