// Package guardcheck is the managed units' ExecStartPre= check: one round
// trip to the local supervisor's guard socket, an exit code and one line for
// the unit's journal. `kha-supervisor guard` and the lean kha-guard program
// (what the drop-ins run) share it, so the two answer alike.
//
// It imports only the configuration and the guard client: systemd runs it
// on every start of a managed unit, and each start of the new leader's
// units waits for it, so what it links is paid at every takeover (the whole
// daemon's package initialisation took about 80 ms on the lab's VM).
package guardcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Exit codes, the same in both programs (kha-supervisor(8) lists them).
const (
	Allowed      = 0 // the supervisor says this node may start the unit
	Refused      = 5 // this node does not hold a valid lease (or the supervisor refused the request)
	NoSupervisor = 6 // the supervisor is not running, not reachable, or gave no usable answer
)

// FallbackSocket is asked when the configuration cannot be loaded: a broken
// file must not leave a managed unit unguarded, and the packaged socket path
// is the likeliest place of a running supervisor. A variable so that tests
// need not touch /run.
var FallbackSocket = guard.DefaultSocket

// Timeout bounds the whole exchange. The supervisor answers from memory, so
// anything near this means it is wedged; refusing is then right.
const Timeout = 2 * time.Second

// Run asks the supervisor configured in configFile whether unit may start,
// prints its answer (stdout when allowed, stderr otherwise: systemd puts both
// in the unit's journal, and a refused `systemctl start` shows stderr) and
// returns the exit code.
func Run(stdout, stderr io.Writer, configFile, unit string) int {
	socket := FallbackSocket
	if cfg, err := config.Load(configFile); err != nil {
		fmt.Fprintf(stderr, "kha-supervisor guard: cannot load the configuration, asking the default socket %s: %v\n", socket, err)
	} else if cfg.Guard.Socket != "" {
		socket = cfg.Guard.Socket
	}

	// Not a context cancelled on SIGTERM: systemd stops a unit by sending
	// SIGTERM to its ExecStartPre=, and the answer (usually a refusal
	// naming the leader) must still be printed then, not replaced by
	// "supervisor not running".
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	a, err := guard.Ask(ctx, socket, unit)
	var se *guard.ServerError
	switch {
	case errors.Is(err, guard.ErrUnreachable):
		fmt.Fprintf(stderr, "kha-supervisor: refusing to start %s: the supervisor is not running or not reachable: %v\n", unit, err)
		return NoSupervisor
	case errors.As(err, &se):
		fmt.Fprintf(stderr, "kha-supervisor: refusing to start %s: the supervisor refused the request: %s\n", unit, se.Msg)
		return Refused
	case err != nil:
		fmt.Fprintf(stderr, "kha-supervisor: refusing to start %s: no usable answer from the supervisor: %v\n", unit, err)
		return NoSupervisor
	case !a.Allowed:
		fmt.Fprintln(stderr, a.Message)
		return Refused
	}
	fmt.Fprintln(stdout, a.Message)
	return Allowed
}
