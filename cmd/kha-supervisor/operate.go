package main

import (
	"context"
	"encoding/json"
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

func handoffCommand(e env) *cobra.Command {
	var to string
	var wait bool
	c := &cobra.Command{
		Use:     "handoff",
		GroupID: groupGroup,
		Short:   "planned switchover: the leader steps down for --to NODE or any other member",
		Long: `Planned switchover: the leader stops its units and releases the lease, and while the request stands only --to NODE (a standby), or without --to any member but the old leader, may campaign.
Refused while the group is frozen, when no member leads, or when the target is not an eligible standby (banned, in cooldown, not running); NODE must be a valid node name (DNS-1123).
--wait waits until the new leader's units are active, at most --timeout, and prints how long the switchover took.`,
	}
	cf := addClientFlags(c)
	c.Flags().StringVar(&to, "to", "", "`node` that should take over (default: any other member)")
	_ = c.RegisterFlagCompletionFunc("to", completeMembers(e, cf))
	c.Flags().BoolVar(&wait, "wait", false, "wait until the new leader's units are active")
	timeout := durationFlag(c.Flags(), "timeout", 60*time.Second, "how long --wait waits")
	c.RunE = func(c *cobra.Command, _ []string) error {
		if to != "" {
			if code := checkNode(e, "--to", to); code != exitOK {
				return exit(code)
			}
		}
		if *timeout <= 0 {
			return exit(fail(e, exitConfig, "--timeout must be positive"))
		}
		s, code := connect(e, c, cf)
		if code != exitOK {
			return exit(code)
		}
		defer s.close()
		res, code := s.handoff(e, to, wait, *timeout)
		if code == exitOK && wait {
			fmt.Fprintf(e.stdout, "handoff %s: %s -> %s (token %d), target units active %s after the request\n",
				res.id, res.from, res.to, res.token, res.took.Round(time.Millisecond))
		} else if code == exitOK {
			fmt.Fprintf(e.stdout, "handoff %s requested: %s steps down for %s\n", res.id, res.from, orAny(to))
		}
		return exit(code)
	}
	return c
}

type switchover struct {
	id         string
	from, to   string
	token      int64
	requested  time.Time
	took       time.Duration
	oldToken   int64
	newMembers map[string]group.Record
}

// handoff validates and writes a switchover request and optionally waits
// for a new leader with active units.
func (s *session) handoff(e env, to string, wait bool, timeout time.Duration) (switchover, int) {
	cs, err := s.cluster(e)
	if err != nil {
		return switchover{}, fail(e, exitFailure, "%v", err)
	}
	if cs.Control.Freeze != nil {
		return switchover{}, fail(e, exitConfig, "refused: the group is frozen (%s); unfreeze first", cs.Control.Freeze.Reason)
	}
	if cs.Leader == "" {
		return switchover{}, fail(e, exitFailure, "refused: no member holds the lease right now; nothing to hand off")
	}
	if to != "" {
		if to == cs.Leader {
			return switchover{}, fail(e, exitConfig, "refused: %s is already the leader", to)
		}
		rec, ok := findMember(cs, to)
		switch {
		case !ok:
			return switchover{}, fail(e, exitConfig, "refused: no live member named %q%s (see kha-supervisor status)", to, didYouMean(cs, to))
		case cs.Control.Banned(to):
			return switchover{}, fail(e, exitConfig, "refused: %s is banned; unban it first", to)
		case rec.State != group.Standby:
			return switchover{}, fail(e, exitConfig, "refused: %s is %s, not standby", to, rec.State)
		case rec.Cooldown.After(time.Now()):
			return switchover{}, fail(e, exitConfig, "refused: %s is in cooldown after unit failures until %s", to, rec.Cooldown.Format(time.RFC3339))
		}
	} else if len(successors(cs, time.Now())) == 0 {
		return switchover{}, fail(e, exitConfig, "refused: no standby member could take over (all banned, in cooldown or not standby)")
	}
	h := group.Handoff{ID: group.NewID(), From: cs.Leader, To: to, Token: cs.Token, At: time.Now()}
	ctx, cancel := s.ctx(e)
	// The request outlives a slow switchover but not a failed one.
	err = group.RequestHandoff(ctx, s.cli, s.keys, h, max(timeout, 4*s.cfg.Lease.TTL))
	cancel()
	if err != nil {
		return switchover{}, fail(e, exitFailure, "%v", err)
	}
	res := switchover{id: h.ID, from: cs.Leader, to: to, requested: h.At, oldToken: cs.Token}
	if !wait {
		return res, exitOK
	}
	ncs, err := s.waitNewLeader(e, cs.Token, to, timeout)
	if err != nil {
		return res, fail(e, exitFailure, "handoff %s: %v", h.ID, err)
	}
	res.to, res.token, res.took = ncs.Leader, ncs.Token, time.Since(h.At)
	return res, exitOK
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
		if !seen[n] && (distance(node, n) <= 2 || strings.HasPrefix(n, node)) {
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
	c := &cobra.Command{
		Use:     "freeze",
		GroupID: groupGroup,
		Short:   "maintenance mode: no promotion, no handoff; fencing stays armed",
		Long: `Maintenance mode for the group: no promotion and no handoff until unfreeze.
The leader keeps its units and keeps renewing; fencing stays armed. While frozen, a leader that stops (ban, fence, crash) is not replaced. --reason is shown by status.`,
	}
	cf := addClientFlags(c)
	c.Flags().StringVar(&reason, "reason", "", "`text` saying why, shown by status")
	c.RunE = func(c *cobra.Command, _ []string) error {
		return withSession(e, c, cf, func(s *session) int {
			ctx, cancel := s.ctx(e)
			defer cancel()
			if err := group.SetFreeze(ctx, s.cli, s.keys, group.Freeze{Reason: reason, By: operator(), At: time.Now()}); err != nil {
				return fail(e, exitFailure, "%v", err)
			}
			fmt.Fprintln(e.stdout, "frozen: no promotion and no handoff until `kha-supervisor unfreeze`; the leader keeps its units, fencing stays armed")
			return exitOK
		})
	}
	return c
}

func unfreezeCommand(e env) *cobra.Command {
	c := &cobra.Command{Use: "unfreeze", GroupID: groupGroup, Short: "end maintenance mode", Long: "End maintenance mode."}
	cf := addClientFlags(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return withSession(e, c, cf, func(s *session) int {
			ctx, cancel := s.ctx(e)
			defer cancel()
			if err := group.ClearFreeze(ctx, s.cli, s.keys); err != nil {
				return fail(e, exitFailure, "%v", err)
			}
			fmt.Fprintln(e.stdout, "unfrozen")
			return exitOK
		})
	}
	return c
}

func banCommand(e env) *cobra.Command {
	var reason string
	var force bool
	c := &cobra.Command{
		Use:     "ban NODE",
		GroupID: groupGroup,
		Short:   "keep NODE out of the election (a leader steps down)",
		Long: `Keep NODE out of the election (like a Pacemaker ban); if it leads, it steps down. The ban lasts until unban, or for --for.
Refused, unless --force, when NODE is not a live member, while the group is frozen (nobody could take over), and when the ban would leave no eligible member (every other one banned, in cooldown or not standby); otherwise it says who takes over.`,
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
	if dur > 0 {
		b.Until = b.At.Add(dur)
	}
	ctx, cancel := s.ctx(e)
	defer cancel()
	if err := group.SetBan(ctx, s.cli, s.keys, b); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	until := "until `kha-supervisor unban " + node + "`"
	if dur > 0 {
		until = "until " + stamp(b.Until)
	}
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
	c := &cobra.Command{
		Use:     "unban NODE",
		GroupID: groupGroup,
		Short:   "lift a ban",
		Long:    "Lift a ban. Refused, unless --force, when NODE is neither a live member nor banned (a mistyped name).",
		Args:    exactArgs("NODE"),
	}
	cf := addClientFlags(c)
	c.ValidArgsFunction = completeMembers(e, cf)
	c.Flags().BoolVar(&force, "force", false, "clear a ban for a name that is neither a member nor banned")
	c.RunE = func(c *cobra.Command, args []string) error {
		node := args[0]
		if code := checkNode(e, "unban", node); code != exitOK {
			return exit(code)
		}
		return withSession(e, c, cf, func(s *session) int { return s.unban(e, node, force) })
	}
	return c
}

func (s *session) unban(e env, node string, force bool) int {
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if _, known := findMember(cs, node); !known && !cs.Control.Banned(node) && !force {
		return fail(e, exitConfig, "refused: %q is neither a live member nor banned in cluster %q%s (see kha-supervisor status); --force clears it anyway", node, s.cfg.Cluster, didYouMean(cs, node))
	}
	ctx, cancel := s.ctx(e)
	defer cancel()
	had, err := group.ClearBan(ctx, s.cli, s.keys, node)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if !had {
		fmt.Fprintf(e.stdout, "%s was not banned\n", node)
		return exitOK
	}
	fmt.Fprintf(e.stdout, "unbanned %s\n", node)
	return exitOK
}

func historyCommand(e env) *cobra.Command {
	var asJSON bool
	var limit int
	c := &cobra.Command{
		Use:     "history",
		GroupID: groupGroup,
		Short:   "show the transition history",
		Long: `Print the group's transition history kept in etcd (history.retain entries), newest --limit, or as JSON with --json.
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
	fmt.Fprintln(tw, "TIME\tNODE\tFROM\tTO\tTOKEN\tKIND\tREASON")
	for _, ev := range evs {
		token := "-"
		if ev.Token != 0 {
			token = fmt.Sprint(ev.Token)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.At.Local().Format("2006-01-02 15:04:05.000 MST"), ev.Node, ev.From, ev.To, token, ev.Kind, ev.Reason)
	}
	_ = tw.Flush()
	return exitOK
}
