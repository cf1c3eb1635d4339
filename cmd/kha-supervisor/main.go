// Command kha-supervisor runs one member of an active/standby group: it wins
// a lease in etcd, only then starts the managed systemd units, and fences
// itself before any other member could win. Subcommands: see usage.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// Exit codes. They are part of the interface: systemd units, scripts and the
// drill read them.
const (
	exitOK           = 0 // success
	exitFailure      = 1 // runtime failure (etcd unreachable, I/O error)
	exitConfig       = 2 // bad configuration or usage; nothing was changed
	exitFenced       = 3 // lease could not be proven; units stopped; restart as standby
	exitFenceFailed  = 4 // fenced, but a unit could not be confirmed stopped
	exitGuardRefused = 5 // guard: this node does not hold a valid lease
	exitGuardNoSup   = 6 // guard: the local supervisor is not reachable
	exitDrillFailed  = 7 // drill: the check or the expectation failed
)

// env is what a command gets from the outside world, injected so that
// commands are plain functions that tests can call.
type env struct {
	ctx    context.Context // cancelled on SIGINT/SIGTERM
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	summary string
	run     func(e env, args []string) int
}

var commands = map[string]command{}

// register adds a subcommand; each lives in its own file.
func register(name, summary string, run func(e env, args []string) int) {
	if _, dup := commands[name]; dup {
		panic("duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

func dispatch(e env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stdout)
		if len(args) == 0 {
			return exitConfig
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "kha-supervisor: unknown command %q (try kha-supervisor help)\n", args[0])
		return exitConfig
	}
	return c.run(e, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kha-supervisor COMMAND [options]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-16s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nexit codes: 0 ok, 1 runtime failure, 2 bad config or usage, 3 fenced,")
	fmt.Fprintln(w, "  4 fence incomplete, 5 guard refused, 6 supervisor unreachable, 7 drill failed")
}
