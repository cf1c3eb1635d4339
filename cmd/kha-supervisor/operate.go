package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() {
	register(handoffCommand)
	register(freezeCommand)
	register(unfreezeCommand)
	register(banCommand)
	register(unbanCommand)
	register(historyCommand)
}

func (s *session) close() { _ = s.cli.Close() }

func (s *session) ctx(e env) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, s.commandTimeout())
}

func (s *session) cluster(e env) (group.ClusterStatus, error) {
	ctx, cancel := s.ctx(e)
	defer cancel()
	return group.ReadCluster(ctx, s.cli, s.keys, s.cfg.Cluster)
}

// operator names who asked, for the records.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	h, _ := os.Hostname()
	return name + "@" + h
}

func fail(e env, code int, format string, a ...any) int {
	fmt.Fprintf(e.stderr, "kha-supervisor: "+format+"\n", a...)
	return code
}

// checkNode applies the configuration's name rule to a node named on the
// command line, before anything is read or written.
func checkNode(e env, what, node string) int {
	if err := config.CheckName(node); err != nil {
		return fail(e, exitConfig, "%s: %v", what, err)
	}
	return exitOK
}

// handoffArgs are the handoff command's flags.
type handoffArgs struct {
	to, reason   string
	wait, cancel bool
	timeout      time.Duration
	expire       time.Duration // 0: handoffExpiry of the configuration
}

func handoffCommand(e env) *cobra.Command {
	var a handoffArgs
	c := &cobra.Command{
		Use:     "handoff",
		GroupID: groupGroup,
		Short:   "planned switchover: the leader steps down for --to NODE or any other member",
		Long: `Planned switchover: the leader stops its units and releases the lease, and while the request stands only --to NODE (a standby), or without --to any member but the old leader, may campaign.
The request expires after --expire (default: one lease TTL, plus takeover_delay, plus for each managed unit stop_timeout + kill_grace + start_timeout, plus hooks.timeout for each of on_demote and on_promote that is set; with --wait at least --timeout), so a switchover that cannot complete does not keep the group leaderless; --cancel withdraws it earlier. Status shows it with its age and expiry.
Refused (exit 2) while the group is frozen, when no member leads, while a request to the current leader is pending, or when the target is not an eligible standby (banned, in cooldown, not running); NODE must be a valid node name (DNS-1123).
--wait waits until the new leader's units are active, at most --timeout, and prints how long the switchover took; exit 1 when it gave up (the request stands until it expires).
Every request, cancel and --wait's outcome is recorded in the history.`,
	}
	cf := addClientFlags(c)
	c.Flags().StringVar(&a.to, "to", "", "`node` that should take over (default: any other member)")
	_ = c.RegisterFlagCompletionFunc("to", completeMembers(e, cf))
	c.Flags().BoolVar(&a.wait, "wait", false, "wait until the new leader's units are active")
	c.Flags().BoolVar(&a.cancel, "cancel", false, "withdraw the handoff request in force")
	c.Flags().StringVar(&a.reason, "reason", "", "`text` saying why, shown by status and recorded in the history")
	timeout := durationFlag(c.Flags(), "timeout", 60*time.Second, "how long --wait waits")
	expire := durationFlag(c.Flags(), "expire", 0, "the request expires after this long (default: from the configuration's timings, see above)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		a.timeout, a.expire = *timeout, *expire
		if code := a.check(e, c); code != exitOK {
			return exit(code)
		}
		s, code := connect(e, c, cf)
		if code != exitOK {
			return exit(code)
		}
		defer s.close()
		if a.cancel {
			return exit(s.cancelHandoff(e, a.reason))
		}
		return exit(s.handoffCmd(e, a))
	}
	return c
}

// check refuses flags that make no sense, before anything is read.
func (a handoffArgs) check(e env, c *cobra.Command) int {
	switch {
	case a.cancel && (a.to != "" || a.wait || c.Flags().Changed("expire") || c.Flags().Changed("timeout")):
		return fail(e, exitConfig, "--cancel withdraws the request in force: it takes no --to, --wait, --timeout or --expire")
	case a.to != "" && checkNode(e, "--to", a.to) != exitOK:
		return exitConfig
	case a.timeout <= 0:
		return fail(e, exitConfig, "--timeout must be positive")
	case c.Flags().Changed("expire") && a.expire <= 0:
		return fail(e, exitConfig, "--expire %s: a request needs a positive lifetime", a.expire)
	}
	return exitOK
}

// handoffCmd is the handoff command once connected.
func (s *session) handoffCmd(e env, a handoffArgs) int {
	res, code := s.handoff(e, a)
	if code != exitOK {
		return code
	}
	if !a.wait {
		fmt.Fprintf(e.stdout, "handoff %s requested: %s steps down for %s; the request expires at %s (in %s) unless fulfilled; `kha-supervisor handoff --cancel` withdraws it\n",
			res.id, res.from, orAny(a.to), stamp(res.expires), time.Until(res.expires).Round(time.Second))
		return exitOK
	}
	ev := action("handoff-wait", res.from, a.reason)
	ncs, err := s.waitNewLeader(e, res.oldToken, a.to, a.timeout)
	if err != nil {
		ev.Outcome = "failed: " + err.Error()
		s.record(e, ev)
		return fail(e, exitFailure, "handoff %s: %v; the request stands until it expires at %s (in %s): `kha-supervisor handoff --cancel` withdraws it",
			res.id, err, stamp(res.expires), time.Until(res.expires).Round(time.Second))
	}
	res.to, res.token, res.took = ncs.Leader, ncs.Token, time.Since(res.requested)
	ev.Outcome = fmt.Sprintf("done: %s active %s after the request (token %d)", res.to, res.took.Round(time.Millisecond), res.token)
	s.record(e, ev)
	s.clearFulfilled(e, res.id)
	fmt.Fprintf(e.stdout, "handoff %s: %s -> %s (token %d), target units active %s after the request\n",
		res.id, res.from, res.to, res.token, res.took.Round(time.Millisecond))
	return exitOK
}

type switchover struct {
	id         string
	from, to   string
	token      int64
	requested  time.Time
	expires    time.Time
	took       time.Duration
	oldToken   int64
	newMembers map[string]group.Record
}

// handoff validates and writes a switchover request (recorded in the
// history with it).
func (s *session) handoff(e env, a handoffArgs) (switchover, int) {
	cs, err := s.cluster(e)
	if err != nil {
		return switchover{}, fail(e, exitFailure, "%v", err)
	}
	now := time.Now()
	if code := refuseHandoff(e, cs, a.to, now); code != exitOK {
		return switchover{}, code
	}
	replace := cs.Control.Handoff // spent: its leadership is over (refuseHandoff)
	expire := a.expire
	if expire == 0 {
		expire = handoffExpiry(s.cfg)
		if a.wait {
			expire = max(expire, a.timeout)
		}
	}
	h := group.Handoff{ID: group.NewID(), From: cs.Leader, To: a.to, Token: cs.Token, At: now,
		Expires: now.Add(expire), By: operator(), Reason: a.reason}
	ev := action("handoff", cs.Leader, a.reason)
	ev.Token = cs.Token
	ev.Outcome = fmt.Sprintf("requested %s: %s steps down for %s; expires %s", h.ID, h.From, orAny(a.to), h.Expires.UTC().Format(time.RFC3339))
	ctx, cancel := s.ctx(e)
	err = group.RequestHandoff(ctx, s.cli, s.keys, h, replace, ev)
	cancel()
	switch {
	case errors.Is(err, group.ErrLeadershipOver):
		return switchover{}, fail(e, exitConfig, "refused: %s stepped down meanwhile (token %d is over); nothing requested (see kha-supervisor status)", cs.Leader, cs.Token)
	case errors.Is(err, group.ErrInForce):
		return switchover{}, fail(e, exitConfig, "refused: another handoff was requested meanwhile; nothing requested (see kha-supervisor status)")
	case err != nil:
		return switchover{}, fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	if replace != nil {
		fmt.Fprintf(e.stdout, "replaced handoff %s, whose leader (token %d) had already stepped down\n", replace.ID, replace.Token)
	}
	return switchover{id: h.ID, from: cs.Leader, to: a.to, requested: h.At, expires: h.Expires, oldToken: cs.Token}, exitOK
}

// refuseHandoff gives the refusal of a handoff to to (any member when
// empty) as the group stands, or exitOK.
func refuseHandoff(e env, cs group.ClusterStatus, to string, now time.Time) int {
	if cs.Control.Freeze != nil {
		return fail(e, exitConfig, "refused: the group is frozen (%s); unfreeze first", cs.Control.Freeze.Reason)
	}
	if cs.Leader == "" {
		return fail(e, exitConfig, "refused: no member holds the lease right now; nothing to hand off")
	}
	if h := cs.Control.Handoff; h != nil && h.Pending(cs.Token) {
		return fail(e, exitConfig, "refused: %s; wait for it, or withdraw it with `kha-supervisor handoff --cancel`", handoffText(*h, cs, now))
	}
	if to == "" {
		if len(successors(cs, now)) == 0 {
			return fail(e, exitConfig, "refused: no standby member could take over (all banned, in cooldown or not standby)")
		}
		return exitOK
	}
	if to == cs.Leader {
		return fail(e, exitConfig, "refused: %s is already the leader", to)
	}
	rec, ok := findMember(cs, to)
	switch {
	case !ok:
		return fail(e, exitConfig, "refused: no live member named %q%s (see kha-supervisor status)", to, didYouMean(cs, to))
	case cs.Control.Banned(to):
		return fail(e, exitConfig, "refused: %s is banned; unban it first", to)
	case rec.State != group.Standby:
		return fail(e, exitConfig, "refused: %s is %s, not standby", to, rec.State)
	case rec.Cooldown.After(now):
		return fail(e, exitConfig, "refused: %s is in cooldown after unit failures until %s", to, rec.Cooldown.Format(time.RFC3339))
	}
	return exitOK
}

// cancelHandoff withdraws the request in force.
func (s *session) cancelHandoff(e env, reason string) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	h := cs.Control.Handoff
	if h == nil {
		return fail(e, exitConfig, "refused: no handoff request is in force in cluster %q; nothing to cancel", s.cfg.Cluster)
	}
	text := handoffText(*h, cs, time.Now())
	ev := action("handoff-cancel", h.From, reason)
	ev.Token = h.Token
	ev.Outcome = "done: withdrew " + text
	ctx, cancel := s.ctx(e)
	err = group.CancelHandoff(ctx, s.cli, s.keys, *h, ev)
	cancel()
	switch {
	case errors.Is(err, group.ErrNotInForce):
		return fail(e, exitConfig, "refused: handoff %s was fulfilled, cancelled or replaced meanwhile; nothing cancelled (see kha-supervisor status)", h.ID)
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	fmt.Fprintf(e.stdout, "cancelled %s\n", text)
	if !h.Pending(cs.Token) {
		fmt.Fprintf(e.stdout, "%s had already stepped down; every eligible member may campaign again\n", h.From)
	}
	return exitOK
}

// clearFulfilled removes the request id once its new leader is active
// (the new leader does so too), so that the next handoff finds none.
func (s *session) clearFulfilled(e env, id string) {
	ctx, cancel := s.ctx(e)
	defer cancel()
	_ = group.ClearHandoff(ctx, s.cli, s.keys, id)
}

// waitNewLeader polls until a leadership other than oldToken is active
// (held by want, if set).
func (s *session) waitNewLeader(e env, oldToken int64, want string, timeout time.Duration) (group.ClusterStatus, error) {
	end := time.Now().Add(timeout)
	for {
		cs, err := s.cluster(e)
		if err == nil && cs.Leader != "" && cs.Token != oldToken && (want == "" || cs.Leader == want) {
			if r, ok := findMember(cs, cs.Leader); ok && r.State == group.Active && r.Token == cs.Token {
				return cs, nil
			}
		}
		if time.Now().After(end) {
			if err != nil {
				return cs, fmt.Errorf("no new active leader within %s (last error: %v)", timeout, err)
			}
			return cs, fmt.Errorf("no new active leader within %s (leader now %q, token %d)", timeout, cs.Leader, cs.Token)
		}
		select {
		case <-e.ctx.Done():
			return cs, e.ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// didYouMean suggests the live members or banned names closest to a
// mistyped node name: "; did you mean m1?", or "".
func didYouMean(cs group.ClusterStatus, node string) string {
	var near []string
	seen := map[string]bool{}
	consider := func(n string) {
		if !seen[n] && (config.EditDistance(node, n) <= 2 || strings.HasPrefix(n, node)) {
			near = append(near, n)
		}
		seen[n] = true
	}
	for _, m := range cs.Members {
		consider(m.Node)
	}
	for n := range cs.Control.Bans {
		consider(n)
	}
	if len(near) == 0 {
		return ""
	}
	sort.Strings(near)
	return "; did you mean " + names(near) + "?"
}

func findMember(cs group.ClusterStatus, node string) (group.Record, bool) {
	for _, m := range cs.Members {
		if m.Node == node {
			return m, true
		}
	}
	return group.Record{}, false
}

func freezeCommand(e env) *cobra.Command {
	var reason string
	var force bool
	c := &cobra.Command{
		Use:     "freeze",
		GroupID: groupGroup,
		Short:   "maintenance mode: no promotion, no handoff; fencing stays armed",
		Long: `Maintenance mode for the group: no promotion and no handoff until unfreeze.
The leader keeps its units and keeps renewing; fencing stays armed. While frozen, a leader that stops (ban, fence, crash) is not replaced. --reason is shown by status and recorded in the history.
Refused (exit 2) when the group is frozen already (the first freeze and its reason stay; unfreeze first), and, unless --force, when no member is registered in the cluster (a misspelt --cluster or etcd.prefix).`,
	}
	cf := addClientFlags(c)
	c.Flags().StringVar(&reason, "reason", "", "`text` saying why, shown by status")
	c.Flags().BoolVar(&force, "force", false, "freeze even a cluster where no member is registered")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return withSession(e, c, cf, func(s *session) int { return s.freeze(e, reason, force) })
	}
	return c
}

func (s *session) freeze(e env, reason string, force bool) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	now := time.Now()
	switch {
	case cs.Control.Freeze != nil:
		return fail(e, exitConfig, "refused: already frozen %s; unfreeze first to freeze with another reason", freezeText(*cs.Control.Freeze, now))
	case len(cs.Members) == 0 && cs.Leader == "" && !force:
		return fail(e, exitConfig, "refused: no member is registered in cluster %q (under %s): a misspelt --cluster or etcd.prefix? --force freezes it anyway", s.cfg.Cluster, s.keys.Members())
	}
	f := group.Freeze{Reason: reason, By: operator(), At: now}
	ctx, cancel := s.ctx(e)
	err = group.SetFreeze(ctx, s.cli, s.keys, f, action("freeze", "", reason))
	cancel()
	switch {
	case errors.Is(err, group.ErrInForce):
		return fail(e, exitConfig, "refused: frozen meanwhile by someone else; nothing changed (see kha-supervisor status)")
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	fmt.Fprintln(e.stdout, "frozen: no promotion and no handoff until `kha-supervisor unfreeze`; the leader keeps its units, fencing stays armed")
	return exitOK
}

func unfreezeCommand(e env) *cobra.Command {
	var reason string
	c := &cobra.Command{Use: "unfreeze", GroupID: groupGroup, Short: "end maintenance mode",
		Long: "End maintenance mode; recorded in the history. Refused (exit 2) when the group is not frozen."}
	cf := addClientFlags(c)
	c.Flags().StringVar(&reason, "reason", "", "`text` saying why, recorded in the history")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return withSession(e, c, cf, func(s *session) int { return s.unfreeze(e, reason) })
	}
	return c
}

func (s *session) unfreeze(e env, reason string) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	f := cs.Control.Freeze
	if f == nil {
		return fail(e, exitConfig, "refused: cluster %q is not frozen; nothing to unfreeze", s.cfg.Cluster)
	}
	text := freezeText(*f, time.Now())
	ev := action("unfreeze", "", reason)
	ev.Outcome = "done: ended the freeze " + text
	ctx, cancel := s.ctx(e)
	err = group.Unfreeze(ctx, s.cli, s.keys, ev)
	cancel()
	switch {
	case errors.Is(err, group.ErrNotInForce):
		return fail(e, exitConfig, "refused: unfrozen meanwhile by someone else; nothing changed")
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	fmt.Fprintf(e.stdout, "unfrozen (was frozen %s)\n", text)
	return exitOK
}

func banCommand(e env) *cobra.Command {
	var reason string
	var force bool
	c := &cobra.Command{
		Use:     "ban NODE",
		GroupID: groupGroup,
		Short:   "keep NODE out of the election (a leader steps down)",
		Long: `Keep NODE out of the election (like a Pacemaker ban); if it leads, it steps down. The ban lasts until unban, or for --for (a positive duration). Status shows it with who, why and until; the history records it.
Refused (exit 2) when NODE is banned already (unban first to change the ban), and, unless --force, when NODE is not a live member, while the group is frozen (nobody could take over), and when the ban would leave no eligible member (every other one banned, in cooldown or not standby); otherwise it says who takes over.`,
		Args: exactArgs("NODE"),
	}
	cf := addClientFlags(c)
	c.ValidArgsFunction = completeMembers(e, cf)
	dur := durationFlag(c.Flags(), "for", 0, "ban expires after this long, e.g. 2h (default: until unban)")
	c.Flags().StringVar(&reason, "reason", "", "`text` saying why, shown by status")
	c.Flags().BoolVar(&force, "force", false, "ban even an unknown member, while frozen, or when nobody could take over")
	c.RunE = func(c *cobra.Command, args []string) error {
		node := args[0]
		if code := checkNode(e, "ban", node); code != exitOK {
			return exit(code)
		}
		if c.Flags().Changed("for") && *dur <= 0 {
			return exit(fail(e, exitConfig, "--for %s: a ban needs a positive duration; leave --for out to ban until unban", *dur))
		}
		return withSession(e, c, cf, func(s *session) int { return s.ban(e, node, *dur, reason, force) })
	}
	return c
}

// ban checks that banning node leaves the group able to run its units,
// then writes the ban.
func (s *session) ban(e env, node string, dur time.Duration, reason string, force bool) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	now := time.Now()
	_, known := findMember(cs, node)
	left := eligible(cs, now, node)
	if b, ok := cs.Control.Bans[node]; ok {
		return fail(e, exitConfig, "refused: %s is already banned %s; unban it first to change the ban", node, banText(b))
	}
	if !force {
		switch {
		case !known:
			return fail(e, exitConfig, "refused: no live member named %q in cluster %q%s (see kha-supervisor status); --force bans it anyway", node, s.cfg.Cluster, didYouMean(cs, node))
		case cs.Control.Freeze != nil:
			return fail(e, exitConfig, "refused: the group is frozen (%s): a banned leader steps down and nobody may take over while frozen; unfreeze first, or --force", cs.Control.Freeze.Reason)
		case len(left) == 0:
			return fail(e, exitConfig, "refused: banning %s would leave no eligible member (the others are banned, in cooldown or not standby); --force bans it anyway", node)
		}
	}
	b := group.Ban{Node: node, Reason: reason, By: operator(), At: now}
	until := "until `kha-supervisor unban " + node + "`"
	if dur > 0 {
		b.Until = b.At.Add(dur)
		until = "until " + stamp(b.Until)
	}
	ev := action("ban", node, reason)
	ev.Outcome = "done: banned " + until + "; " + takeover(cs, node, left)
	ctx, cancel := s.ctx(e)
	err = group.SetBan(ctx, s.cli, s.keys, b, ev)
	cancel()
	switch {
	case errors.Is(err, group.ErrInForce):
		return fail(e, exitConfig, "refused: %s was banned meanwhile by someone else; nothing changed (see kha-supervisor status)", node)
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	fmt.Fprintf(e.stdout, "banned %s %s; %s\n", node, until, takeover(cs, node, left))
	return exitOK
}

// takeover says what a ban of node does to the leadership.
func takeover(cs group.ClusterStatus, node string, left []string) string {
	switch {
	case len(left) == 0:
		return "nobody is eligible to take over"
	case node == cs.Leader:
		return "it steps down; " + names(left) + " takes over"
	case cs.Leader != "":
		return cs.Leader + " keeps leading"
	default:
		return names(left) + " may take over"
	}
}

func unbanCommand(e env) *cobra.Command {
	var force bool
	var reason string
	c := &cobra.Command{
		Use:     "unban NODE",
		GroupID: groupGroup,
		Short:   "lift a ban",
		Long:    "Lift a ban; recorded in the history. Refused (exit 2) when NODE is not banned; --force deletes a ban record that status cannot read.",
		Args:    exactArgs("NODE"),
	}
	cf := addClientFlags(c)
	c.ValidArgsFunction = completeMembers(e, cf)
	c.Flags().BoolVar(&force, "force", false, "delete the ban record of NODE even when it cannot be read")
	c.Flags().StringVar(&reason, "reason", "", "`text` saying why, recorded in the history")
	c.RunE = func(c *cobra.Command, args []string) error {
		node := args[0]
		if code := checkNode(e, "unban", node); code != exitOK {
			return exit(code)
		}
		return withSession(e, c, cf, func(s *session) int { return s.unban(e, node, reason, force) })
	}
	return c
}

func (s *session) unban(e env, node, reason string, force bool) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	b, ok := cs.Control.Bans[node]
	if !ok && !force {
		if _, known := findMember(cs, node); !known {
			return fail(e, exitConfig, "refused: %q is neither a live member nor banned in cluster %q%s (see kha-supervisor status)", node, s.cfg.Cluster, didYouMean(cs, node))
		}
		return fail(e, exitConfig, "refused: %s is not banned; nothing to unban", node)
	}
	ev := action("unban", node, reason)
	ev.Outcome = "done: lifted the ban " + banText(b)
	if !ok {
		ev.Outcome = "done: deleted an unreadable ban record (--force)"
	}
	ctx, cancel := s.ctx(e)
	err = group.Unban(ctx, s.cli, s.keys, node, ev)
	cancel()
	switch {
	case errors.Is(err, group.ErrNotInForce):
		return fail(e, exitConfig, "refused: no ban record of %q (lifted meanwhile, or expired); nothing changed", node)
	case err != nil:
		return fail(e, exitFailure, "%v", err)
	}
	s.trim(e)
	fmt.Fprintf(e.stdout, "unbanned %s\n", node)
	return exitOK
}

func historyCommand(e env) *cobra.Command {
	var asJSON bool
	var limit int
	c := &cobra.Command{
		Use:     "history",
		GroupID: groupGroup,
		Short:   "show the transition history and the operators' actions",
		Long: `Print the group's history kept in etcd (history.retain entries), newest --limit, or as JSON with --json: every member's transitions, and every operator action that changed the group (freeze, unfreeze, ban, unban, handoff, handoff-cancel, drill-failover) with who (user@host), why and its outcome, and the outcome of handoff --wait (handoff-wait) and of a drill (drill-result).
Times are local (the TZ environment variable applies) and carry their zone.`,
	}
	cf := addClientFlags(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().IntVar(&limit, "limit", 50, "newest `n` entries (0: all)")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if limit < 0 {
			return exit(fail(e, exitConfig, "--limit %d: must be 0 (all) or more", limit))
		}
		return withSession(e, c, cf, func(s *session) int { return s.history(e, limit, asJSON) })
	}
	return c
}

func (s *session) history(e env, limit int, asJSON bool) int {
	ctx, cancel := s.ctx(e)
	defer cancel()
	evs, err := group.ReadHistory(ctx, s.cli, s.keys, limit)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(evs)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tNODE\tFROM\tTO\tTOKEN\tKIND\tBY\tREASON")
	for _, ev := range evs {
		token := "-"
		if ev.Token != 0 {
			token = fmt.Sprint(ev.Token)
		}
		// A member's transition is by its daemon; an operator's action
		// has who asked, and its outcome after the reason.
		by, reason := "-", ev.Reason
		if ev.Operator() {
			by = ev.By
			reason = strings.TrimPrefix(orDash(ev.Reason)+" => "+ev.Outcome, "- => ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.At.Local().Format("2006-01-02 15:04:05.000 MST"),
			orDash(ev.Node), orDash(string(ev.From)), orDash(string(ev.To)), token, ev.Kind, by, reason)
	}
	_ = tw.Flush()
	return exitOK
}
