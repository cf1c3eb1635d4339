package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

func init() {
	register("handoff", "planned switchover: the leader steps down for NODE (--to) or any other member", handoffCmd)
	register("freeze", "maintenance mode: no promotion, no handoff; fencing stays armed", freezeCmd)
	register("unfreeze", "end maintenance mode", unfreezeCmd)
	register("ban", "keep NODE out of the election (a leader steps down) [--for D]", banCmd)
	register("unban", "lift a ban", unbanCmd)
	register("history", "show the transition history [--json] [--limit N]", historyCmd)
}

// session is a connection to the group for an operator command.
type session struct {
	cfg  config.Config
	cli  *clientv3.Client
	keys supervisor.Keys
}

// loadConfig parses the common -c flag (fs already holds the command's own
// flags) and loads the configuration; a refusal is printed and becomes
// exitConfig.
func loadConfig(e env, fs *flag.FlagSet, args []string) (config.Config, int) {
	path := fs.String("c", config.DefaultPath, "configuration file")
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		return config.Config{}, exitConfig
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return config.Config{}, exitConfig
	}
	return cfg, exitOK
}

// connect loads the configuration (see loadConfig) and dials etcd.
func connect(e env, fs *flag.FlagSet, args []string) (*session, int) {
	cfg, code := loadConfig(e, fs, args)
	if code != exitOK {
		return nil, code
	}
	ctx, cancel := context.WithTimeout(e.ctx, cfg.Etcd.DialTimeout.D()+2*cfg.Etcd.RequestTimeout.D()+time.Second)
	defer cancel()
	cli, err := etcdconn.Dial(ctx, cfg.Etcd)
	if err != nil {
		fmt.Fprintln(e.stderr, "kha-supervisor:", err)
		return nil, exitFailure
	}
	return &session{cfg: cfg, cli: cli, keys: supervisor.NewKeys(cfg.Etcd.Prefix, cfg.Cluster)}, exitOK
}

func (s *session) close() { _ = s.cli.Close() }

func (s *session) ctx(e env) (context.Context, context.CancelFunc) {
	return context.WithTimeout(e.ctx, 5*s.cfg.Etcd.RequestTimeout.D()+time.Second)
}

func (s *session) cluster(e env) (supervisor.ClusterStatus, error) {
	ctx, cancel := s.ctx(e)
	defer cancel()
	return supervisor.ReadCluster(ctx, s.cli, s.keys, s.cfg.Cluster)
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

func handoffCmd(e env, args []string) int {
	fs := flag.NewFlagSet("handoff", flag.ContinueOnError)
	to := fs.String("to", "", "node that should take over (default: any other member)")
	wait := fs.Bool("wait", false, "wait until the new leader's units are active")
	timeout := fs.Duration("timeout", 60*time.Second, "how long --wait waits")
	s, code := connect(e, fs, args)
	if code != exitOK {
		return code
	}
	defer s.close()
	res, code := s.handoff(e, *to, *wait, *timeout)
	if code == exitOK && *wait {
		fmt.Fprintf(e.stdout, "handoff %s: %s -> %s (token %d), target units active %s after the request\n",
			res.id, res.from, res.to, res.token, res.took.Round(time.Millisecond))
	} else if code == exitOK {
		fmt.Fprintf(e.stdout, "handoff %s requested: %s steps down for %s\n", res.id, res.from, orAny(*to))
	}
	return code
}

type switchover struct {
	id         string
	from, to   string
	token      int64
	requested  time.Time
	took       time.Duration
	oldToken   int64
	newMembers map[string]supervisor.Record
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
			return switchover{}, fail(e, exitConfig, "refused: no live member named %q (see kha-supervisor status)", to)
		case cs.Control.Banned(to):
			return switchover{}, fail(e, exitConfig, "refused: %s is banned; unban it first", to)
		case rec.State != supervisor.Standby:
			return switchover{}, fail(e, exitConfig, "refused: %s is %s, not standby", to, rec.State)
		case rec.Cooldown.After(time.Now()):
			return switchover{}, fail(e, exitConfig, "refused: %s is in cooldown after unit failures until %s", to, rec.Cooldown.Format(time.RFC3339))
		}
	} else if countStandbys(cs) == 0 {
		return switchover{}, fail(e, exitConfig, "refused: no standby member could take over")
	}
	h := supervisor.Handoff{ID: supervisor.NewID(), From: cs.Leader, To: to, Token: cs.Token, At: time.Now()}
	ctx, cancel := s.ctx(e)
	// The request outlives a slow switchover but not a failed one.
	err = supervisor.RequestHandoff(ctx, s.cli, s.keys, h, max(timeout, 4*s.cfg.Lease.TTL.D()))
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
func (s *session) waitNewLeader(e env, oldToken int64, want string, timeout time.Duration) (supervisor.ClusterStatus, error) {
	end := time.Now().Add(timeout)
	for {
		cs, err := s.cluster(e)
		if err == nil && cs.Leader != "" && cs.Token != oldToken && (want == "" || cs.Leader == want) {
			if r, ok := findMember(cs, cs.Leader); ok && r.State == supervisor.Active && r.Token == cs.Token {
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

func findMember(cs supervisor.ClusterStatus, node string) (supervisor.Record, bool) {
	for _, m := range cs.Members {
		if m.Node == node {
			return m, true
		}
	}
	return supervisor.Record{}, false
}

func countStandbys(cs supervisor.ClusterStatus) int {
	n := 0
	for _, m := range cs.Members {
		if m.State == supervisor.Standby && !cs.Control.Banned(m.Node) && !m.Cooldown.After(time.Now()) {
			n++
		}
	}
	return n
}

func freezeCmd(e env, args []string) int {
	fs := flag.NewFlagSet("freeze", flag.ContinueOnError)
	reason := fs.String("reason", "", "why (shown in status)")
	s, code := connect(e, fs, args)
	if code != exitOK {
		return code
	}
	defer s.close()
	ctx, cancel := s.ctx(e)
	defer cancel()
	if err := supervisor.SetFreeze(ctx, s.cli, s.keys, supervisor.Freeze{Reason: *reason, By: operator(), At: time.Now()}); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	fmt.Fprintln(e.stdout, "frozen: no promotion and no handoff until `kha-supervisor unfreeze`; the leader keeps its units, fencing stays armed")
	return exitOK
}

func unfreezeCmd(e env, args []string) int {
	s, code := connect(e, flag.NewFlagSet("unfreeze", flag.ContinueOnError), args)
	if code != exitOK {
		return code
	}
	defer s.close()
	ctx, cancel := s.ctx(e)
	defer cancel()
	if err := supervisor.ClearFreeze(ctx, s.cli, s.keys); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	fmt.Fprintln(e.stdout, "unfrozen")
	return exitOK
}

func banCmd(e env, args []string) int {
	fs := flag.NewFlagSet("ban", flag.ContinueOnError)
	dur := fs.Duration("for", 0, "ban expires after this long (default: until unban)")
	reason := fs.String("reason", "", "why (shown in status)")
	node, rest := splitNode(args)
	s, code := connect(e, fs, rest)
	if code != exitOK {
		return code
	}
	defer s.close()
	if node == "" {
		return fail(e, exitConfig, "usage: kha-supervisor ban NODE [--for D] [--reason TEXT]")
	}
	if *dur < 0 {
		return fail(e, exitConfig, "--for %s: must be positive", *dur)
	}
	b := supervisor.Ban{Node: node, Reason: *reason, By: operator(), At: time.Now()}
	if *dur > 0 {
		b.Until = b.At.Add(*dur)
	}
	ctx, cancel := s.ctx(e)
	defer cancel()
	if err := supervisor.SetBan(ctx, s.cli, s.keys, b); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	until := "until `kha-supervisor unban " + node + "`"
	if *dur > 0 {
		until = "until " + b.Until.Format(time.RFC3339)
	}
	fmt.Fprintf(e.stdout, "banned %s %s; if it leads, it steps down\n", node, until)
	return exitOK
}

func unbanCmd(e env, args []string) int {
	node, rest := splitNode(args)
	s, code := connect(e, flag.NewFlagSet("unban", flag.ContinueOnError), rest)
	if code != exitOK {
		return code
	}
	defer s.close()
	if node == "" {
		return fail(e, exitConfig, "usage: kha-supervisor unban NODE")
	}
	ctx, cancel := s.ctx(e)
	defer cancel()
	had, err := supervisor.ClearBan(ctx, s.cli, s.keys, node)
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

// splitNode takes the first non-flag argument as the node name, so both
// `ban m1 --for 1h` and `ban --for 1h m1` work.
func splitNode(args []string) (string, []string) {
	for i, a := range args {
		if len(a) > 0 && a[0] != '-' && (i == 0 || !flagTakesValue(args[i-1])) {
			return a, append(append([]string{}, args[:i]...), args[i+1:]...)
		}
	}
	return "", args
}

func flagTakesValue(a string) bool {
	switch a {
	case "-c", "--c", "-for", "--for", "-reason", "--reason":
		return true
	}
	return false
}

func historyCmd(e env, args []string) int {
	fs := flag.NewFlagSet("history", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	limit := fs.Int("limit", 50, "newest N entries (0: all)")
	s, code := connect(e, fs, args)
	if code != exitOK {
		return code
	}
	defer s.close()
	ctx, cancel := s.ctx(e)
	defer cancel()
	evs, err := supervisor.ReadHistory(ctx, s.cli, s.keys, *limit)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if *asJSON {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ev.At.Format("2006-01-02 15:04:05.000"), ev.Node, ev.From, ev.To, token, ev.Kind, ev.Reason)
	}
	_ = tw.Flush()
	return exitOK
}
