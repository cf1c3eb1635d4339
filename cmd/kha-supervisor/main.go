// Command kha-supervisor runs one member of an active/standby group: it wins
// a lease in etcd, only then starts the managed systemd units, and fences
// itself before any other member could win. Subcommands: see usage.
//
//go:generate go run . gen-docs ../..
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/internal/guardcheck"
)

// Exit codes. They are part of the interface: systemd units, scripts and the
// drill read them. README.md and kha-supervisor(8) list them from exitCodes.
const (
	exitOK           = daemon.ExitOK           // success
	exitFailure      = daemon.ExitFailure      // runtime failure (etcd unreachable, I/O error)
	exitConfig       = daemon.ExitConfig       // bad configuration or usage; nothing was changed
	exitFenced       = daemon.ExitFenced       // lease could not be proven; units stopped; restart as standby
	exitFenceFailed  = daemon.ExitFenceFailed  // fenced, but a unit could not be confirmed stopped
	exitGuardRefused = guardcheck.Refused      // guard: this node does not hold a valid lease
	exitGuardNoSup   = guardcheck.NoSupervisor // guard: the local supervisor is not reachable
	exitDrillFailed  = 7                       // drill: the check or the expectation failed
	exitNoActive     = 8                       // status: no member is active with all its units
	exitLocalBad     = 9                       // status: this node's member is missing or unhealthy
	exitNoStandby    = 10                      // status: the leader runs, but no other member could take over
)

// exitCodes documents the codes above, in order, for the generated docs.
var exitCodes = []struct {
	code int
	text string
}{
	{exitOK, "success; for `run`, a graceful stop (units stopped, lease released)"},
	{exitFailure, "runtime failure (etcd or systemd unreachable, I/O error); `handoff --wait`: no new leader within --timeout (the request stands until it expires)"},
	{exitConfig, "bad configuration or usage (unknown command, flag or argument); a refused operator request (frozen, no leader, a request already in force, nothing to undo, an unknown node or cluster); nothing was changed"},
	{exitFenced, "`run`: fenced — the lease could not be proven; units stopped; systemd restarts it as standby"},
	{exitFenceFailed, "`run`: fenced, but a unit could not be confirmed stopped (look at the node)"},
	{exitGuardRefused, "`guard`: refused — this node does not hold a valid lease"},
	{exitGuardNoSup, "`guard`: the local supervisor is not running or not reachable"},
	{exitDrillFailed, "`drill`: the ordering check failed, the expectation was missed, or no new leader within --timeout"},
	{exitNoActive, "`status`: no member is active with all its units (no leader, or the leader's units are not all active)"},
	{exitLocalBad, "`status`: this node (the configuration file's `node`) has no member record, or is fencing, stopped or in cooldown"},
	{exitNoStandby, "`status`: the leader runs its units, but no other member could take over (none registered, or every other one banned, in cooldown, not standby, or the group frozen): redundancy is lost"},
}

// exitSummary is the exit codes for the help, one short line each.
func exitSummary() string {
	var b strings.Builder
	b.WriteString("Exit codes (kha-supervisor(8) has the details):")
	for _, x := range exitCodes {
		fmt.Fprintf(&b, "\n  %d  %s", x.code, strings.ReplaceAll(x.text, "`", ""))
	}
	return b.String()
}

// env is what a command gets from the outside world, injected so that
// commands are plain functions that tests can call.
type env struct {
	ctx    context.Context // cancelled on SIGINT/SIGTERM
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string // os.Getenv; nil: os.Getenv
}

func (e env) env(key string) string {
	if e.getenv == nil {
		return os.Getenv(key)
	}
	return e.getenv(key)
}

// builders make the subcommands; each file registers its own.
var builders []func(e env) *cobra.Command

// register adds a subcommand builder; each command lives in its own file.
func register(b func(e env) *cobra.Command) { builders = append(builders, b) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(env{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// dispatch runs one command line and returns its exit code.
func dispatch(e env, args []string) int {
	root := newRoot(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	var ce codeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return int(ce)
	default:
		// A usage error from cobra or pflag: name it, point at the help.
		fmt.Fprintf(e.stderr, "kha-supervisor: %v\n", err)
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitConfig
	}
}

// completionUnknownShell is `completion` without a shell it knows: a usage
// error naming the shells (cobra would print the help and exit 0).
func completionUnknownShell(c *cobra.Command, args []string) error {
	var shells []string
	for _, sh := range c.Commands() {
		if sh.IsAvailableCommand() {
			shells = append(shells, sh.Name())
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("%q needs a shell: %s", c.CommandPath(), strings.Join(shells, ", "))
	}
	return fmt.Errorf("unknown shell %q for %q; supported shells: %s", args[0], c.CommandPath(), strings.Join(shells, ", "))
}

// Command groups, as `kha-supervisor --help` and the man page show them.
const (
	groupNode  = "node"
	groupGroup = "group"
)

func newRoot(e env) *cobra.Command {
	root := &cobra.Command{
		Use:   "kha-supervisor",
		Short: "lease-fenced active/standby supervisor for systemd units",
		Long: "kha-supervisor makes sure that at most one node of a group runs a set of systemd units: " +
			"it wins a lease in etcd, only then starts the managed units, and fences itself before any other node could win.\n\n" +
			exitSummary(),
		Version:       versionText(),
		SilenceErrors: true,
		SilenceUsage:  true,
		// Without a command: the help, and a usage error for scripts.
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(c, args[0])
			}
			_ = c.Help()
			return codeError(exitConfig)
		},
		Args: cobra.ArbitraryArgs,
	}
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SuggestionsMinimumDistance = 2
	root.AddGroup(
		&cobra.Group{ID: groupNode, Title: "Commands for this node (run as root, read the configuration):"},
		&cobra.Group{ID: groupGroup, Title: "Commands for the whole group, through etcd (any node, any operator with etcd access):"},
	)
	root.PersistentFlags().StringP("config", "c", "", "configuration `file` (default "+defaultConfigPath()+")")
	root.SetFlagErrorFunc(flagError)
	for _, b := range builders {
		c := b(e)
		if c.Args == nil {
			c.Args = noArgs
		}
		root.AddCommand(c)
	}
	root.SetHelpCommandGroupID(groupNode)
	root.SetCompletionCommandGroupID(groupNode)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Short = "show the help of a command"
			c.Long = "Print the help of a command (the same as COMMAND --help): its arguments, flags and what it does."
		case "completion":
			c.Short = "print a shell completion script"
			c.Long = "Print a shell completion script. The packages install those for bash, zsh and fish."
			for _, sh := range c.Commands() {
				sh.Short = "print the " + sh.Name() + " completion script"
				sh.Long = "Print the " + sh.Name() + " completion script, for example: kha-supervisor completion " + sh.Name() + " > FILE."
			}
			c.Args = cobra.ArbitraryArgs
			c.RunE = completionUnknownShell
		}
	}
	return root
}
