package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(guardCommand) }

func guardCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:     "guard UNIT",
		GroupID: groupNode,
		Short:   "ExecStartPre= check: may UNIT start on this node? (exit 0 yes, 5 no, 6 no supervisor)",
		Long: `Exit 0 only if the local supervisor says that this node is active and its lease is valid for at least S_max more (long enough to stop UNIT again); otherwise print one line naming the current leader and exit 5, or 6 when the supervisor is not running or not reachable.
It asks the supervisor over its root-only unix socket (guard.socket). The managed units run it as their ExecStartPre=, so that systemctl start of a managed unit on a standby fails loudly.`,
		Args: exactArgs("UNIT"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return config.Default().Units.Managed, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			return exit(guardCmd(e, configPath(c), args[0]))
		},
	}
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
func guardCmd(e env, configFile, unit string) int {
	path := &configFile
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
