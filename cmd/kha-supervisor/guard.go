package main

import (
	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(guardCommand) }

func guardCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:     "guard UNIT",
		GroupID: groupNode,
		Short:   "ExecStartPre= check: may UNIT start on this node? (exit 0 yes, 5 no, 6 no supervisor)",
		Long: `Exit 0 only if the local supervisor says that this node is active and its lease is valid for at least S_max more (long enough to stop UNIT again); otherwise print one line naming the current leader and exit 5, or 6 when the supervisor is not running or not reachable.
It asks the supervisor over its root-only unix socket (guard.socket). The managed units' drop-ins run the same check as their ExecStartPre= through ` + "`/usr/libexec/kha-supervisor/kha-guard UNIT`" + `, a program without the daemon's dependencies (every unit start waits for it), so that systemctl start of a managed unit on a standby fails loudly.`,
		Args: exactArgs("UNIT"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return config.Default().Units.Managed, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			return exit(guardCmd(e, configPath(c), args[0]))
		},
	}
}

// guardCmd is `kha-supervisor guard [-c FILE] UNIT`: the check the managed
// units' drop-ins run through the lean kha-guard program (internal/guardcheck,
// shared by both), kept here for an operator's use and for drop-ins written
// before kha-guard existed.
func guardCmd(e env, configFile, unit string) int {
	return guardcheck.Run(e.stdout, e.stderr, configFile, unit)
}
