package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() {
	register("guard", "ExecStartPre= check: may UNIT start on this node? (exit 0 yes, 5 no, 6 no supervisor)", guardCmd)
}

// guardFallbackSocket is asked when the configuration cannot be loaded: a
// broken file must not leave a managed unit unguarded, and the packaged
// socket path is the likeliest place of a running supervisor. A variable so
// that tests need not touch /run.
var guardFallbackSocket = guard.DefaultSocket

// guardTimeout bounds the whole exchange. The supervisor answers from
// memory, so anything near this means it is wedged; refusing is then right.
const guardTimeout = 2 * time.Second

// guardCmd is `kha-supervisor guard [-c FILE] UNIT`, run by systemd as the
// managed units' ExecStartPre=. It runs on every start of a managed unit, so
// it does one thing: one round trip over the local socket. Its message goes
// to the unit's journal and to the `systemctl start` that failed.
func guardCmd(e env, args []string) int {
	fs := flag.NewFlagSet("guard", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	path := fs.String("c", config.DefaultPath, "configuration `file` (for guard.socket)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: kha-supervisor guard [-c FILE] UNIT")
		fmt.Fprintln(fs.Output(), "\nAsks the local supervisor whether UNIT may start on this node: only while this")
		fmt.Fprintln(fs.Output(), "node holds a valid lease with enough time left to stop UNIT again. Exit 0 when")
		fmt.Fprintln(fs.Output(), "allowed, 5 when refused, 6 when the supervisor is not reachable.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitConfig
	}
	unit := fs.Arg(0)

	socket := guardFallbackSocket
	if cfg, err := config.Load(*path); err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor guard: cannot load the configuration, asking the default socket %s: %v\n", socket, err)
	} else if cfg.Guard.Socket != "" {
		socket = cfg.Guard.Socket
	}

	// Not e.ctx: systemd stops a unit by sending SIGTERM to its
	// ExecStartPre=, and the answer (usually a refusal naming the leader)
	// must still be printed then, not replaced by "supervisor not running".
	ctx, cancel := context.WithTimeout(context.Background(), guardTimeout)
	defer cancel()
	a, err := guard.Ask(ctx, socket, unit)
	var se *guard.ServerError
	switch {
	case errors.Is(err, guard.ErrUnreachable):
		fmt.Fprintf(e.stderr, "kha-supervisor: refusing to start %s: the supervisor is not running or not reachable: %v\n", unit, err)
		return exitGuardNoSup
	case errors.As(err, &se):
		fmt.Fprintf(e.stderr, "kha-supervisor: refusing to start %s: the supervisor refused the request: %s\n", unit, se.Msg)
		return exitGuardRefused
	case err != nil:
		fmt.Fprintf(e.stderr, "kha-supervisor: refusing to start %s: no usable answer from the supervisor: %v\n", unit, err)
		return exitGuardNoSup
	case !a.Allowed:
		fmt.Fprintln(e.stderr, a.Message)
		return exitGuardRefused
	}
	fmt.Fprintln(e.stdout, a.Message)
	return exitOK
}
