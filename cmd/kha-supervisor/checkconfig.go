package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(checkConfigCommand) }

func checkConfigCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:     "check-config",
		GroupID: groupNode,
		Short:   "validate the configuration file; print the effective settings and fence window",
		Long: `Read and validate the configuration file, print the effective settings (every default filled in) and the fence window they give, and exit 0; or print one line naming the file, line, key and value that is refused and exit 2.
It applies exactly the checks the daemon applies at start-up.`,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(checkConfig(e, configPath(c)))
		},
	}
}

// checkConfig is `kha-supervisor check-config [-c FILE]`: it applies exactly
// the checks the daemon applies at start-up, so a file it accepts is a file
// the daemon accepts (barring files that change in between).
func checkConfig(e env, configFile string) int {
	path := &configFile
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor: %v\n", err)
		return exitConfig
	}
	if err := cfg.Describe(e.stdout); err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor check-config: write: %v\n", err)
		return exitFailure
	}
	return exitOK
}
