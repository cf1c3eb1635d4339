package main

import (
	"errors"
	"flag"
	"fmt"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() {
	register("check-config", "validate the configuration file; print the effective settings and fence window", checkConfig)
}

// checkConfig is `kha-supervisor check-config [-c FILE]`: it applies exactly
// the checks the daemon applies at start-up, so a file it accepts is a file
// the daemon accepts (barring files that change in between).
func checkConfig(e env, args []string) int {
	fs := flag.NewFlagSet("check-config", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	path := fs.String("c", config.DefaultPath, "configuration `file`")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kha-supervisor check-config [-c FILE]")
		fmt.Fprintln(fs.Output(), "\nPrints the effective configuration and its fence window; exit 0 when the file")
		fmt.Fprintln(fs.Output(), "is accepted, 2 (with one line naming file, line, key and value) when refused.")
		fmt.Fprintln(fs.Output(), "Also reads the installed kha-supervisor.service's WatchdogSec and the managed")
		fmt.Fprintln(fs.Output(), "units' TimeoutStopSec (from systemd, or the unit files when it is not running)")
		fmt.Fprintln(fs.Output(), "and exits 2 when the daemon would refuse to start with them.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "kha-supervisor check-config: unexpected argument %q (the file goes after -c)\n", fs.Arg(0))
		return exitConfig
	}
	return checkConfigPath(e, *path)
}

// checkConfigPath checks the file at path and the installed units it
// relies on (checkInstalled: the supervisor unit's WatchdogSec, the managed
// units' TimeoutStopSec), then prints the effective configuration and what
// was found.
func checkConfigPath(e env, path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor: %v\n", err)
		return exitConfig
	}
	r, closeReader := openUnitReader(e.ctx)
	uc := checkInstalled(cfg, r)
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
	return exitOK
}
