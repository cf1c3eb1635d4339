// Command kha-lab runs the single-machine two-rack lab: it builds the
// network, the etcd cluster and the masters, injects the failure matrix's
// faults and proves that no two nodes ever run a managed unit at once.
//
// It also is the programs the lab runs: etcd members (etcd-member), the
// witness units (witness) and the process that holds the masters'
// containers (hold-masters).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string) error) {
	commands[name] = command{summary, run}
}

// errUsage makes main exit 2 without printing the error again.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcd-member" {
		// Signals are the member's own business.
		os.Exit(etcd.MemberMain(os.Args[2:], os.Stderr))
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args[1:], os.Stderr))
}

func dispatch(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		return 2
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kha-lab: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := c.run(ctx, args[1:]); err != nil {
		if errors.Is(err, errUsage) || errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintf(stderr, "kha-lab %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: kha-lab COMMAND [options]   (run as root)")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nevery lab command takes --prefix (default khalab) and --state (default /srv/PREFIX)")
}

// labFlags are the options every lab command shares.
type labFlags struct {
	prefix, state, supervisor, deb, packaging, profile, etcd string
	etcdLayout, plane                                        string // plane.go
}

func (f *labFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.prefix, "prefix", lab.DefaultPrefix, "name prefix of the lab's namespaces, containers and directories")
	fs.StringVar(&f.state, "state", "", "state directory (default /srv/PREFIX)")
	fs.StringVar(&f.supervisor, "supervisor", "", "kha-supervisor binary (default: next to kha-lab)")
	fs.StringVar(&f.deb, "deb", "", "kha-supervisor .deb to install in the masters (default: binary + packaging files)")
	fs.StringVar(&f.packaging, "packaging", "packaging", "the source tree's packaging directory (without --deb)")
	fs.StringVar(&f.profile, "profile", "", "timing profile: fast (TTL 6s), fast-kill (TTL 4s, units killed at once) or default (TTL 10s); default: what up chose, else fast")
	fs.StringVar(&f.etcd, "etcd", "", "etcd raft timing: stock (100 ms heartbeat, 1 s election; the default for up) or tuned (50/500 ms); later commands use what up chose")
	fs.StringVar(&f.etcdLayout, "etcd-layout", "", "where the etcd members live: separate (their own rack; the default for up) or stacked (real plane: e1 in m1's rack and e2 in m2's, each its apiserver's only member, e3 alone); later commands use what up chose")
	fs.StringVar(&f.plane, "plane", "", "control plane: witness (stand-ins) or real (kube-apiserver, kube-scheduler, kube-controller-manager); default: what the lab was brought up with, else witness")
}

func (f *labFlags) open() (*lab.Lab, error) {
	var p lab.Profile // what up chose
	if f.profile != "" {
		var err error
		if p, err = lab.ProfileByName(f.profile); err != nil {
			return nil, err
		}
	}
	l, err := lab.New(lab.Config{
		Prefix: f.prefix, StateDir: f.state, Supervisor: f.supervisor,
		Deb: f.deb, Packaging: f.packaging, Profile: p, Etcd: f.etcd,
		EtcdLayout: f.etcdLayout,
	})
	if err != nil {
		return nil, err
	}
	return l, attachPlane(l, f.plane) // plane.go
}

// parse parses a command's flags, which may come before, between or after
// its positional arguments (`run all --repeat 3`, as the Makefile passes
// LAB_FLAGS last); the positional arguments are returned in order.
func parse(name string, args []string, fs *flag.FlagSet) ([]string, error) {
	fs.Init(name, flag.ContinueOnError)
	var pos []string
	for {
		if len(args) > 0 && args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		if err := fs.Parse(args); err != nil {
			return nil, errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil // Parse consumed a "--"
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func init() {
	register("witness", "heartbeat writer standing in for a managed unit (run by systemd in a master)", runWitness)
	register("hold-masters", "boot the masters and hold them until SIGTERM (started by up)", runHold)
}

func runWitness(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var o witness.Options
	fs.StringVar(&o.Node, "node", "", "node name")
	fs.StringVar(&o.Unit, "unit", "", "unit name (without .service)")
	fs.StringVar(&o.Dir, "dir", "/lab/witness", "shared log directory")
	fs.BoolVar(&o.IgnoreTerm, "ignore-term", false, "ignore SIGTERM (only SIGKILL ends it)")
	fs.DurationVar(&o.CrashAfter, "crash-after", 0, "exit 1 after this long (0: never)")
	fs.StringVar(&o.FaultDir, "faults", "", "directory of fault files (NODE.UNIT: ignore-term, crash-after=D), read at start")
	if _, err := parse("witness", args, &fs); err != nil {
		return err
	}
	return witness.Main(o)
}

func runHold(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	if _, err := parse("hold-masters", args, &fs); err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	return l.HoldMasters(ctx)
}

// timeout bounds a whole CLI command.
func timeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// parseLeading parses flags up to the first positional argument and returns
// everything from there verbatim (exec: the command's own flags).
func parseLeading(name string, args []string, fs *flag.FlagSet) ([]string, error) {
	fs.Init(name, flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return nil, errUsage
	}
	return fs.Args(), nil
}
