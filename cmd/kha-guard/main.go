// Command kha-guard is the managed units' ExecStartPre= check: it asks the
// local kha-supervisor over its root-only guard socket whether UNIT may start
// on this node, and exits 0 (yes), 5 (no: this node does not hold a valid
// lease) or 6 (no supervisor to ask). The packaged drop-ins run it as
//
//	ExecStartPre=+/usr/libexec/kha-supervisor/kha-guard %n
//
// It is `kha-supervisor guard` without the daemon's dependencies (etcd's and
// Kubernetes' clients, Prometheus): systemd runs it on every start of a
// managed unit, and the new leader's units wait for it at every takeover.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// exitUsage is kha-supervisor's exit code for bad usage.
const exitUsage = 2

func main() {
	// systemd stops a unit by sending SIGTERM to its ExecStartPre=, and the
	// answer (usually a refusal naming the leader) must still be printed
	// then; guardcheck.Timeout bounds the exchange. Caught and dropped, as
	// kha-supervisor guard does under its signal context.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, os.Interrupt)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("kha-guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configFile := config.DefaultPath
	fs.StringVar(&configFile, "c", configFile, "configuration `file`")
	fs.StringVar(&configFile, "config", configFile, "configuration `file`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kha-guard [-c FILE] UNIT\n"+
			"Exit 0 if the local kha-supervisor says that UNIT may start on this node, 5 if not, 6 if it is not reachable.\n")
		fs.PrintDefaults()
	}
	switch err := fs.Parse(args); {
	case err == flag.ErrHelp:
		// Not 0: a guard that says yes to -h would let a drop-in
		// with a stray -h start the unit anywhere.
		return exitUsage
	case err != nil:
		return exitUsage // the flag package has named the culprit
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "kha-guard: want exactly one UNIT, got %d argument(s) %q\n", fs.NArg(), fs.Args())
		fs.Usage()
		return exitUsage
	}
	return guardcheck.Run(stdout, stderr, configFile, fs.Arg(0))
}
