package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/agent"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

func init() {
	register("node-agent", "keep a Node object alive as a kubelet would (run by up --plane real in a worker's namespace)", runNodeAgent)
}

// planes attached by open, for down (which must keep the audit logs).
var planes = map[*lab.Lab]*plane.Plane{}

// attachPlane gives l the real control plane when asked (--plane real) or
// when the running lab was brought up with it. The binaries are built on
// first use, with progress, and never rebuilt when cached.
func attachPlane(l *lab.Lab, name string) error {
	if name == "" {
		saved, err := l.SavedPlane()
		if err != nil {
			return err
		}
		name = saved
	}
	switch name {
	case lab.PlaneWitness:
		return nil
	case lab.PlaneReal:
	default:
		fmt.Fprintf(os.Stderr, "kha-lab: --plane %q: want witness or real\n", name)
		return errUsage
	}
	r, err := build.Ensure(context.Background(), build.Options{Progress: os.Stderr})
	if err != nil {
		return fmt.Errorf("real plane: %w", err)
	}
	planes[l] = plane.New(l, r.Binaries, slog.Default())
	return nil
}

func runNodeAgent(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	node := fs.String("node", "", "Node name")
	var kcs multiFlag
	fs.Var(&kcs, "kubeconfig", "kubeconfig of an apiserver (repeat: tried in order)")
	podLog := fs.String("pod-log", "", "file the agent appends its pods' start and stop records to (JSON lines)")
	var ignore multiFlag
	fs.Var(&ignore, "ignore-namespace", "namespace whose pods the agent does not run (repeat)")
	if _, err := parse("node-agent", args, &fs); err != nil {
		return err
	}
	a, err := agent.FromKubeconfigs(*node, kcs, slog.Default())
	if err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab node-agent: %v\n", err)
		return errUsage
	}
	a.PodLog = &agent.PodLog{Path: *podLog}
	a.Ignore = map[string]bool{}
	for _, ns := range ignore {
		a.Ignore[ns] = true
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	return a.Run(ctx)
}

type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
