package main

import (
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(checkConfigCommand) }

func checkConfigCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:     "check-config",
		GroupID: groupNode,
		Short:   "validate the configuration file; print the effective settings and fence window",
		Long: `Read and validate the configuration file, print the effective settings (every default filled in) and the fence window they give, and exit 0; or print one line naming the file, line, key and value that is refused and exit 2.
It applies exactly the checks the daemon applies at start-up: it also reads the installed kha-supervisor.service's WatchdogSec and the managed units' TimeoutStopSec (from systemd, or the unit files when it is not running) and exits 2 when the daemon would refuse to start with them.`,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(checkConfig(e, nodeConfigPath(e, c)))
		},
	}
}

// checkConfig is `kha-supervisor check-config [-c FILE]`: it applies exactly
// the checks the daemon applies at start-up, so a file it accepts is a file
// the daemon accepts (barring files that change in between).
func checkConfig(e env, configFile string) int {
	return checkConfigPath(e, configFile)
}

// checkConfigPath checks the file at path and the installed units it
// relies on (daemon.CheckInstalled: the supervisor unit's WatchdogSec, the managed
// units' TimeoutStopSec), then prints the effective configuration and what
// was found.
func checkConfigPath(e env, path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor: %v\n", err)
		return exitConfig
	}
	r, closeReader := daemon.OpenUnitReader(e.ctx)
	uc := daemon.CheckInstalled(cfg, r)
	closeReader()
	if uc.Refusal != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor: %v\n", uc.Refusal)
		return exitConfig
	}
	if err := cfg.Describe(e.stdout); err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor check-config: write: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(e.stdout, "\n# Installed units (the daemon applies the same checks at start-up):")
	for _, n := range uc.Notes {
		fmt.Fprintf(e.stdout, "#   %s\n", n)
	}
	for _, w := range uc.Warnings {
		fmt.Fprintf(e.stdout, "#   NOT CHECKED: %s\n", w)
		fmt.Fprintf(e.stderr, "kha-supervisor check-config: warning: %s\n", w)
	}
	for _, w := range slices.Concat(cfg.Warnings(), cfg.StackedWarnings(isLocalHost)) {
		fmt.Fprintf(e.stdout, "# WARNING: %s\n", w)
		fmt.Fprintf(e.stderr, "kha-supervisor check-config: warning: %s\n", w)
	}
	return exitOK
}
