package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

func init() {
	register("up", "build the lab (idempotent): network, etcd, masters, supervisors", runUp)
	register("down", "remove everything the lab made (also after a crash); keeps logs and reports", runDown)
	register("status", "show the lab: namespaces, faults, etcd members, masters", runStatus)
	register("cut", "partition: cut HOSTS-A from HOSTS-B (comma lists, or rack:NAME)", runCut)
	register("heal", "remove partitions: heal HOSTS-A HOSTS-B, or heal with no argument for all", runHeal)
	register("exec", "run a command in a master: exec m1 systemctl status", runExec)
}

func runUp(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	if _, err := parse("up", args, &fs); err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	ctx, cancel := timeout(ctx, 10*time.Minute)
	defer cancel()
	return l.Up(ctx)
}

func runDown(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	if _, err := parse("down", args, &fs); err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	ctx, cancel := timeout(ctx, 5*time.Minute)
	defer cancel()
	err = l.Down(ctx)
	if p, ok := planes[l]; ok { // real plane (plane.go): keep the audit logs
		err = errors.Join(err, p.Down())
	}
	return err
}

func runStatus(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	if _, err := parse("status", args, &fs); err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	nss, _ := topo.Namespaces(l.Config().Prefix)
	fmt.Printf("namespaces: %s\n", strings.Join(nss, " "))
	for h, peers := range l.Topo.Cuts(ctx) {
		fmt.Printf("fault: %s drops packets to %s\n", h, strings.Join(peers, " "))
	}
	if err := l.Open(); err != nil {
		return err
	}
	for _, st := range l.Etcd.Statuses(ctx) {
		if st.Err != nil {
			fmt.Printf("etcd %s: %v\n", st.Member, st.Err)
		} else {
			fmt.Printf("etcd %s: id %x leader %x term %d\n", st.Member, st.ID, st.Leader, st.RaftTerm)
		}
	}
	nodes, err := l.Masters()
	if err != nil {
		return err
	}
	for name, n := range nodes {
		fmt.Printf("master %s: container leader PID %d\n", name, n.Leader)
	}
	return nil
}

// hosts expands "m1,m2" or "rack:r1".
func hosts(t *topo.Topology, arg string) []string {
	if r, ok := strings.CutPrefix(arg, "rack:"); ok {
		return t.InRack(r)
	}
	return strings.Split(arg, ",")
}

func runCut(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	rest, err := parse("cut", args, &fs)
	if err != nil {
		return err
	}
	if len(rest) != 2 {
		fmt.Fprintln(os.Stderr, "usage: kha-lab cut HOSTS-A HOSTS-B   e.g. cut rack:r1 rack:etcd")
		return errUsage
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	return l.Topo.Cut(ctx, hosts(l.Topo, rest[0]), hosts(l.Topo, rest[1]))
}

func runHeal(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	rest, err := parse("heal", args, &fs)
	if err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	switch len(rest) {
	case 0:
		return l.Topo.HealAll(ctx)
	case 2:
		return l.Topo.Heal(ctx, hosts(l.Topo, rest[0]), hosts(l.Topo, rest[1]))
	}
	return errUsage
}

func runExec(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	rest, err := parseLeading("exec", args, &fs)
	if err != nil {
		return err
	}
	if len(rest) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kha-lab exec MASTER COMMAND...")
		return errUsage
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	n, err := l.Master(rest[0])
	if err != nil {
		return err
	}
	cmd := n.Command(ctx, rest[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}
