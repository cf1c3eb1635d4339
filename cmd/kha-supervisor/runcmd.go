package main

import (
	"github.com/spf13/cobra"

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
