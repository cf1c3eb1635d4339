package topo

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// silencePriority orders the lab's silence rules before the router's main
// table (ip rule priority 32766), and names them for HealAll.
const silencePriority = "1000"

// Silence drops every packet between the hosts of a and b inside the
// router, as a dead switch does: nothing reaches the other side and nothing
// comes back, not even an error to the sender's kernel, so a new connection
// waits on its SYN retransmissions (1 s, then 3 s) instead of failing at
// once as it does behind Cut's blackhole routes on the hosts. Hosts of the
// same rack do not cross the router and stay connected. Each direction is
// a policy rule with the blackhole action (the kernel drops a forwarded
// packet it matches without an ICMP error), all in one `ip -batch`; a
// silence already in place is replaced.
func (t *Topology) Silence(ctx context.Context, a, b []string) error {
	// A rule left by a run that stopped midway would make `add` fail.
	if err := t.silenceRules(ctx, a, b, "del"); err != nil {
		return err
	}
	return t.silenceRules(ctx, a, b, "add")
}

// Unsilence removes what Silence added for the same sets.
func (t *Topology) Unsilence(ctx context.Context, a, b []string) error {
	return t.silenceRules(ctx, a, b, "del")
}

func (t *Topology) silenceRules(ctx context.Context, a, b []string, verb string) error {
	var script strings.Builder
	pairs := map[string]bool{} // "from X to Y" of every rule this call covers
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
				fmt.Fprintf(&script, "rule %s priority %s from %s to %s blackhole\n", verb, silencePriority, p[0].Addr, p[1].Addr)
				pairs[fmt.Sprintf("from %s to %s", p[0].Addr, p[1].Addr)] = true
			}
		}
	}
	args := []string{"-n", t.NetNS(RouterName), "-batch", "-"}
	if verb == "del" {
		args = append([]string{"-force"}, args...) // a rule already gone is no reason to keep the others
	}
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Stdin = strings.NewReader(script.String())
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	if verb == "del" {
		// -force reports the rules that were already gone as failures
		// too: what counts is that none of ours is left.
		return t.silenceLeft(ctx, pairs, err, out)
	}
	return fmt.Errorf("topo: silence (%s): %w: %s", strings.ReplaceAll(strings.TrimSpace(script.String()), "\n", "; "), err, strings.TrimSpace(string(out)))
}

// silenceLeft is nil when no rule of pairs is left in the router after a
// `del` batch that reported delErr (with its output).
func (t *Topology) silenceLeft(ctx context.Context, pairs map[string]bool, delErr error, out []byte) error {
	rules, err := t.silenceRulesInPlace(ctx)
	if err != nil {
		return fmt.Errorf("topo: unsilence: %w: %s; and %w", delErr, strings.TrimSpace(string(out)), err)
	}
	var left []string
	for _, rule := range rules {
		if pairs[strings.TrimSuffix(rule, " blackhole")] {
			left = append(left, rule)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("topo: unsilence left %d rule(s) in place (%s): %w: %s", len(left), strings.Join(left, "; "), delErr, strings.TrimSpace(string(out)))
	}
	return nil
}

// unsilenceAll removes every silence rule from the router.
func (t *Topology) unsilenceAll(ctx context.Context) error {
	rules, err := t.silenceRulesInPlace(ctx)
	if err != nil {
		return err
	}
	for range rules {
		if err := ipn(ctx, t.NetNS(RouterName), "rule", "del", "priority", silencePriority); err != nil {
			return err
		}
	}
	return nil
}

// silenceRulesInPlace lists the router's silence rules, one "from X to Y
// blackhole" each.
func (t *Topology) silenceRulesInPlace(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-n", t.NetNS(RouterName), "rule", "show", "priority", silencePriority).Output()
	if err != nil {
		return nil, fmt.Errorf("topo: list silence rules: %w", err)
	}
	var rules []string
	for line := range strings.Lines(string(out)) {
		if _, rule, ok := strings.Cut(line, ":"); ok {
			rules = append(rules, strings.TrimSpace(rule))
		}
	}
	return rules, nil
}
