package topo

import (
	"context"
	"errors"
	"fmt"
)

// silencePriority orders the lab's silence rules before the router's main
// table (ip rule priority 32766).
const silencePriority = "1000"

// Silence drops every packet between the hosts of a and b inside the
// router, as a dead switch does: nothing reaches the other side and nothing
// comes back, not even an error to the sender's kernel, so a new connection
// waits on its SYN retransmissions (1 s, then 3 s) instead of failing at
// once as it does behind Cut's blackhole routes on the hosts. Hosts of the
// same rack do not cross the router and stay connected. Each direction is
// a policy rule with the blackhole action (the kernel drops a forwarded
// packet it matches without an ICMP error).
func (t *Topology) Silence(ctx context.Context, a, b []string) error {
	return t.silenceRules(ctx, a, b, "add")
}

// Unsilence removes what Silence added for the same sets.
func (t *Topology) Unsilence(ctx context.Context, a, b []string) error {
	return t.silenceRules(ctx, a, b, "del")
}

func (t *Topology) silenceRules(ctx context.Context, a, b []string, verb string) error {
	rt := t.NetNS(RouterName)
	var errs []error
	for _, x := range a {
		for _, y := range b {
			hx, err := t.Host(x)
			if err != nil {
				return err
			}
			hy, err := t.Host(y)
			if err != nil {
				return err
			}
			for _, p := range [][2]Host{{hx, hy}, {hy, hx}} {
				if err := ipn(ctx, rt, "rule", verb, "priority", silencePriority, "from", p[0].Addr.String(), "to", p[1].Addr.String(), "blackhole"); err != nil {
					errs = append(errs, fmt.Errorf("silence %s -> %s: %w", p[0].Name, p[1].Name, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}
