package config

import (
	"bufio"
	"fmt"
	"io"
	"reflect"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// Describe writes the effective configuration as TOML (every key, in the
// order of config.example.toml; the output loads back to the same Config)
// followed by the fence window it gives, with the arithmetic spelled out.
// Secrets are never printed: the configuration only holds the path of the
// password file, and that path is what appears.
func (c Config) Describe(w io.Writer) error {
	bw := bufio.NewWriter(w)
	src := c.Path
	if src == "" {
		src = "(built in code)"
	}
	fmt.Fprintf(bw, "# kha-supervisor effective configuration, from %s\n", oneLine(src))
	fmt.Fprintf(bw, "# (keys the file leaves out show their defaults; \"from profile\" marks the values\n")
	fmt.Fprintf(bw, "# the profile set because the file leaves them out)\n")
	c.describeProfile(bw)
	cv := reflect.ValueOf(c)
	writeTable(bw, cv, schema, c.note)
	c.describeWindow(bw)
	c.describeEtcdFence(bw)
	return bw.Flush()
}

// notes are end-of-line comments for keys whose printed value needs context.
var notes = map[string]string{
	"node":               "default: the host name, lower-cased",
	"etcd.password_file": "path only; the password is never printed",
}

// note is the end-of-line comment for key in Describe, "" for none.
func (c Config) note(key string) string {
	note := notes[key]
	if c.FromProfileKey(key) {
		if note != "" {
			note += "; "
		}
		note += "from profile " + quote(c.Profile)
	}
	return note
}

func writeTable(w io.Writer, cv reflect.Value, t *node, note func(key string) string) {
	if t.key != "" {
		fmt.Fprintf(w, "\n[%s]\n", t.key)
	}
	for _, n := range t.children { // plain keys must precede sub-tables in TOML
		if n.kind == kindTable {
			continue
		}
		line := n.name + " = " + renderField(cv.FieldByIndex(n.index))
		if text := note(n.key); text != "" {
			line += " # " + oneLine(text)
		}
		fmt.Fprintln(w, line)
	}
	for _, n := range t.children {
		if n.kind == kindTable {
			writeTable(w, cv, n, note)
		}
	}
}

// describeProfile names the profile, what it assumes, and what this
// configuration gives: the takeover time and the stall it rides out follow
// the effective keys, not the profile's own numbers.
func (c Config) describeProfile(w io.Writer) {
	p := c.SelectedProfile()
	s := c.Stall()
	takeover := c.Lease.TTL + c.Lease.TakeoverDelay
	verdict := "ok"
	if s.Short() {
		verdict = "SHORTER: lease.accept_short_window = true; an etcd leader election fences the leader"
	}
	fmt.Fprintf(w, "# profile %s: takeover about %s after a failure; rides out %s without a renewal\n", quote(p.Name), takeover, s.Window)
	fmt.Fprintf(w, "#   an etcd leader election can leave %s without a renewal (%s)\n", s.Gap, verdict)
	if len(c.FromProfile) < len(profileKeys) && c.Path != "" {
		fmt.Fprintf(w, "#   (the profile alone: %s; this file overrides some of its keys)\n", p.Summary)
	}
	fmt.Fprintf(w, "#   needs from etcd: %s\n", p.Etcd)
	fmt.Fprintf(w, "#   supervisor unit WatchdogSec=%s (kha-supervisor install-dropins writes it)\n", p.Watchdog)
}

// describeWindow prints the fence window inequality (docs/architecture.md) with this
// configuration's numbers.
func (c Config) describeWindow(w io.Writer) {
	win := c.Window()
	renew := c.Lease.RenewInterval
	span := win.Span(win.TTL)
	margin := win.Margin()              // lease.slack; under a backstop without a watchdog at least 500ms
	safe := span + win.StopMax + margin // TTL*(1-rho), rounded exactly as Span rounds it
	p := func(format string, args ...any) { fmt.Fprintf(w, "# "+format+"\n", args...) }
	fmt.Fprintln(w)
	p("Fence window (docs/architecture.md). t_s = when the last successful renewal was SENT;")
	p("no other node can win the lease before t_s + lease.ttl, or t_s + TTL*(1-rho) on this clock.")
	p("  S_max    = units.stop_timeout + units.kill_grace = %s + %s = %s", c.Units.StopTimeout, c.Units.KillGrace, win.StopMax)
	if margin == win.Slack {
		p("  fence_at = t_s + X,  X = TTL*(1-rho) - S_max - slack   (rho = lease.clock_rate_error, slack = lease.slack)")
	} else {
		p("  fence_at = t_s + X,  X = TTL*(1-rho) - S_max - max(slack, 500ms)   (without a watchdog the backstop is none; slack = lease.slack)")
	}
	p("         X = %s*(1-%g) - %s - %s", win.TTL, win.ClockRate, win.StopMax, margin)
	p("           = %s - %s - %s = %s", safe, win.StopMax, margin, span)
	switch {
	case renew <= 0:
		p("  renewals: lease.renew_interval %s is not positive", renew)
	default:
		fit := int64(span / renew)
		verdict := "ok"
		if span < 2*renew {
			verdict = "REFUSED: under 2"
		}
		p("  renewals: X / lease.renew_interval = %s / %s = %d renew intervals fit (at least 2 required: %s)", span, renew, max(fit, 0), verdict)
	}
	// Under systemd's watchdog the margin after S_max is max(delta, W + A), or
	// delta where the watchdog is the backstop; W is the profile's, which
	// install-dropins writes into the unit.
	ww := win
	ww.Watchdog = c.SelectedProfile().Watchdog
	verdict := "ok"
	if ww.Validate(renew) != nil {
		verdict = "refused at start: lower WatchdogSec or lengthen lease.ttl"
	}
	if ww.Backstopped() {
		p("  under systemd WatchdogSec=%s (profile %s), the backstop: X = TTL*(1-rho) - S_max - delta = %s (%s);",
			ww.Watchdog, quote(c.Profile), ww.Span(ww.TTL), verdict)
		p("    pings stop at t_s + TTL*(1-rho) - S_max - W - 250ms = t_s + %s, so a frozen or late loop is killed by t_s + %s",
			ww.PingSpan(ww.TTL), ww.PingSpan(ww.TTL)+ww.Watchdog+fencing.WatchdogAccuracy)
	} else {
		p("  under systemd WatchdogSec=%s (profile %s): X = TTL*(1-rho) - S_max - max(delta, W + 250ms) = %s (%s)",
			ww.Watchdog, quote(c.Profile), ww.Span(ww.TTL), verdict)
	}
	st := c.Stall()
	verdict = "ok"
	if st.Short() {
		verdict = "SHORTER, accepted by lease.accept_short_window: an etcd leader election fences the leader"
	}
	p("  etcd leader election: G = 2*lease.renew_interval + 2*election timeout %s + %s = %s; X %s must exceed G (%s)",
		st.Election, electionRounds, st.Gap, st.Window, verdict)
	if d := c.Lease.TakeoverDelay; d > 0 {
		p("  takeover: after winning, units start %s later (lease.takeover_delay)", d)
	}
}

// describeEtcdFence says what orders the old term's writes in etcd under
// this configuration. Without [etcd_fence] a write the old leader's
// kube-apiserver handed to an etcd member on its side of a partition (a
// member on that master, or in its rack) can commit after the next
// leader's first write: the member forwards it at the heal, and nothing on
// either master can recall it. With it, the revoke acts on the etcd
// configured here, which must be the apiservers' own.
func (c Config) describeEtcdFence(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, "# "+format+"\n", args...) }
	fmt.Fprintln(w)
	p("The old term's writes in etcd (docs/architecture.md, \"The old term's writes in etcd\"):")
	if c.EtcdFence.Enabled() {
		p("  etcd_fence on: each takeover revokes etcd role %s from the kube-apiserver of every other master", quote(c.EtcdFence.Role))
		p("  that may still write, before the new term writes; etcd then refuses at apply what that apiserver")
		p("  proposed before the revoke. It acts on the etcd configured above, so the apiservers must keep their")
		p("  data there (the daemon refuses to start when the role covers no key in it)")
		return
	}
	p("  etcd_fence off: a write the old leader's kube-apiserver handed to an etcd member that a partition")
	p("  leaves on its side (a member on that master or in its rack) can commit after the next leader's first")
	p("  write; only etcd_fence makes etcd refuse it, with kha-supervisor on the apiservers' etcd (lab 73, 75)")
}
