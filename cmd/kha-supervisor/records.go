package main

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// The operator's actions on record: each command that changes the group
// writes its history entry in the same etcd transaction as the change
// (group.SetFreeze, SetBan, RequestHandoff, ...), so the history has it
// exactly when it took effect. Outcomes that come later (what --wait saw,
// a drill's verdict) and a failover drill's request (group.RequestDrill,
// which tests also call) are appended on their own. Refusals change nothing
// and are not recorded: they were printed to the one who asked, and a
// refusal of a misspelt --cluster must not write under that name.

// action starts the history entry of an operator's action about node
// ("" for the whole group).
func action(kind, node, reason string) group.Event {
	return group.Event{At: time.Now(), Node: node, Kind: kind, Reason: reason, By: operator(), Outcome: "done"}
}

// record appends an outcome learnt after the action; a failure to record it
// is a warning (the action itself stands).
func (s *session) record(e env, ev group.Event) {
	ctx, cancel := s.ctx(e)
	defer cancel()
	if err := group.AppendHistory(ctx, s.cli, s.keys, ev, s.cfg.History.Retain); err != nil {
		fmt.Fprintf(e.stderr, "kha-supervisor: warning: %s not recorded in the history: %v\n", ev.Kind, err)
	}
}

// trim keeps the history at history.retain entries after an action wrote
// one; the members trim it too, so a failure here is harmless.
func (s *session) trim(e env) {
	ctx, cancel := s.ctx(e)
	defer cancel()
	_ = group.TrimHistory(ctx, s.cli, s.keys, s.cfg.History.Retain)
}

// handoffExpiry is how long a handoff request stands by default: the
// longest a clean switchover may take without anything failing. The old
// leader stops each unit (stop_timeout, then kill_grace) and runs its
// on_demote hook; the target, which may campaign at once, runs on_promote,
// waits takeover_delay and starts each unit (start_timeout); one lease TTL
// covers noticing the request and the promotion barrier's reads. Past it,
// the request no longer keeps the other members from campaigning.
func handoffExpiry(cfg config.Config) time.Duration {
	n := time.Duration(max(1, len(cfg.Units.Managed)))
	d := cfg.Lease.TTL + cfg.Lease.TakeoverDelay + n*(cfg.Units.StopTimeout+cfg.Units.KillGrace+cfg.Units.StartTimeout)
	for _, h := range [][]string{cfg.Hooks.OnDemote, cfg.Hooks.OnPromote} {
		if len(h) > 0 {
			d += cfg.Hooks.Timeout
		}
	}
	return d
}

// ago is a time's age for people: "12s ago".
func ago(now, t time.Time) string { return now.Sub(t).Round(time.Second).String() + " ago" }

// freezeText describes a freeze: since when, by whom, why.
func freezeText(f group.Freeze, now time.Time) string {
	return fmt.Sprintf("since %s (%s) by %s: %s", stamp(f.At), ago(now, f.At), orDash(f.By), orDash(f.Reason))
}

// banText describes a ban: since when, by whom, until when, why.
func banText(b group.Ban) string {
	until := "until `kha-supervisor unban " + b.Node + "`"
	if !b.Until.IsZero() {
		until = "until " + stamp(b.Until)
	}
	return fmt.Sprintf("since %s by %s %s: %s", stamp(b.At), orDash(b.By), until, orDash(b.Reason))
}

// handoffText describes a handoff request as the group stands: its age,
// who asked and why, whether its leader stepped down, and its expiry.
func handoffText(h group.Handoff, cs group.ClusterStatus, now time.Time) string {
	s := fmt.Sprintf("handoff %s requested %s", h.ID, ago(now, h.At))
	if h.By != "" {
		s += " by " + h.By
	}
	if h.Reason != "" {
		s += " (" + h.Reason + ")"
	}
	if h.Pending(cs.Token) {
		s += fmt.Sprintf(": %s (token %d) steps down for %s", h.From, h.Token, orAny(h.To))
	} else {
		only := h.To
		if only == "" {
			only = "members other than " + h.From
		}
		s += fmt.Sprintf(": %s (token %d) stepped down; only %s may campaign", h.From, h.Token, only)
	}
	if h.Expires.IsZero() {
		return s + "; expiry not recorded (requested by an older kha-supervisor; it lives on an etcd lease)"
	}
	if left := h.Expires.Sub(now); left > 0 {
		return s + fmt.Sprintf("; expires in %s, at %s", left.Round(time.Second), stamp(h.Expires))
	}
	return s + "; expired at " + stamp(h.Expires) + " (etcd removes it with its lease)"
}

// printControl writes the operator requests in force, above the status
// table: the freeze, every ban (of a member or not), the handoff request.
func printControl(w io.Writer, cs group.ClusterStatus, now time.Time) {
	if f := cs.Control.Freeze; f != nil {
		fmt.Fprintf(w, "*** FROZEN (maintenance) %s — no promotion, no handoff; fencing stays armed; until `kha-supervisor unfreeze` ***\n",
			freezeText(*f, now))
	}
	var banned []string
	for n := range cs.Control.Bans {
		banned = append(banned, n)
	}
	sort.Strings(banned)
	for _, n := range banned {
		fmt.Fprintf(w, "BANNED %s %s\n", n, banText(cs.Control.Bans[n]))
	}
	if h := cs.Control.Handoff; h != nil {
		fmt.Fprintln(w, handoffText(*h, cs, now))
	}
	for _, u := range cs.Control.Unreadable {
		fmt.Fprintln(w, "UNREADABLE control record:", u)
	}
}
