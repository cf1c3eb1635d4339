package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
)

func init() { register(statusCommand) }

func statusCommand(e env) *cobra.Command {
	var asJSON, watch bool
	var output string
	c := &cobra.Command{
		Use:     "status",
		GroupID: groupGroup,
		Short:   "show the leader and every member, from etcd",
		Long: `Print the group as etcd knows it now: the leader, its fencing token and the time left on its lease (read live from etcd), and for every member its host, role, state, units, token, the age of its record, version, and ban or cooldown expiry; above it the freeze, every ban and the handoff request in force, with who asked, why, since and until when.
Units show as "2/2 active"; -o wide lists each unit's state, -o json (or --json) prints JSON. --watch prints the status again every --interval until interrupted.
Warns when no member is eligible to run the units, and hints at a wrong cluster or etcd.prefix when no member is registered.
--watch redraws in place on a terminal (and prints one frame after another otherwise); when etcd does not answer within the interval it says so, with the time of the last answer.
Exit status 8 when no member is active with all its units, 9 when this node (the configuration file's node) has no member record or is fencing, stopped or in cooldown, 10 when the leader runs but no other member could take over (redundancy lost: warned in the output too); 0 otherwise.`,
	}
	cf := addClientFlags(c)
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (same as -o json)")
	c.Flags().StringVarP(&output, "output", "o", "", "output `format`: wide (every unit's state) or json")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "print again every --interval until interrupted")
	interval := durationFlag(c.Flags(), "interval", 2*time.Second, "how often --watch reads etcd")
	_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"wide", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.RunE = func(c *cobra.Command, _ []string) error {
		switch {
		case output != "" && output != "wide" && output != "json":
			return exit(fail(e, exitConfig, "-o %q: want wide or json", output))
		case asJSON:
			output = "json"
		}
		if *interval <= 0 {
			return exit(fail(e, exitConfig, "--interval must be positive"))
		}
		return withSession(e, c, cf, func(s *session) int { return s.status(e, output, watch, *interval) })
	}
	return c
}

// status prints once, or with watch until interrupted; the exit code is the
// last verdict's.
func (s *session) status(e env, output string, watch bool, interval time.Duration) int {
	local := ""
	if s.fromFile {
		local = s.cfg.Node
	}
	tty := watch && output != "json" && isTerminal(e.stdout)
	var lastAnswer time.Time
	for {
		cs, err := s.readStatus(e, watch, interval)
		switch {
		case err != nil && (!watch || e.ctx.Err() != nil):
			return fail(e, exitFailure, "%v", err)
		case err != nil:
			since := "never answered"
			if !lastAnswer.IsZero() {
				since = "last answer " + stamp(lastAnswer) + ", " + time.Since(lastAnswer).Round(time.Second).String() + " ago"
			}
			// No redraw: the last good frame stays on the screen above.
			fmt.Fprintf(e.stdout, "%s: etcd does not answer (%s): %v\n", stamp(time.Now()), since, err)
		default:
			lastAnswer = time.Now()
			if tty {
				fmt.Fprint(e.stdout, "\x1b[H\x1b[2J") // home, clear: redraw in place
			}
			code := s.printOnce(e, cs, output, local, watch)
			if !watch {
				return code
			}
		}
		select {
		case <-e.ctx.Done():
			return exitOK
		case <-time.After(interval):
		}
	}
}

// readStatus reads the group; under --watch within the interval (but at
// least etcd.request_timeout), so that a stalled etcd is reported at the
// next frame rather than after the whole command timeout.
func (s *session) readStatus(e env, watch bool, interval time.Duration) (group.ClusterStatus, error) {
	if !watch {
		return s.cluster(e)
	}
	ctx, cancel := context.WithTimeout(e.ctx, min(s.commandTimeout(), max(interval, s.cfg.Etcd.RequestTimeout)))
	defer cancel()
	return group.ReadCluster(ctx, s.cli, s.keys, s.cfg.Cluster)
}

// isTerminal reports whether w is a terminal (status --watch redraws there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (s *session) printOnce(e env, cs group.ClusterStatus, output, local string, watch bool) int {
	now := time.Now()
	v := judge(cs, now, local)
	if output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(cs)
	} else {
		if watch {
			fmt.Fprintf(e.stdout, "--- %s\n", stamp(now))
		}
		printStatus(e.stdout, cs, now, output == "wide")
		if len(cs.Members) == 0 {
			fmt.Fprintf(e.stdout, "\nno member is registered under %s: wrong cluster (%q) or etcd.prefix (%q)? Is kha-supervisor running?\n",
				s.keys.Members(), s.cfg.Cluster, s.cfg.Etcd.Prefix)
		}
	}
	// JSON carries the facts; a line on stderr would spoil a combined
	// output that scripts parse.
	if v.code != exitOK && output != "json" {
		fmt.Fprintf(e.stderr, "kha-supervisor: status %d: %s\n", v.code, v.why)
	}
	return v.code
}

// verdict is status's exit code and its reason.
type verdict struct {
	code int
	why  string
}

// judge gives status's exit code: no active member first, then this node.
func judge(cs group.ClusterStatus, now time.Time, local string) verdict {
	leader, ok := findMember(cs, cs.Leader)
	switch {
	case cs.Leader == "":
		return verdict{exitNoActive, "no member holds the lease"}
	case !ok:
		return verdict{exitNoActive, cs.Leader + " holds the lease but has no member record"}
	case leader.State != group.Active:
		return verdict{exitNoActive, fmt.Sprintf("the leader %s is %s, not active", cs.Leader, leader.State)}
	case active(leader) < len(leader.Units):
		return verdict{exitNoActive, fmt.Sprintf("the leader %s has %s", cs.Leader, unitSummary(leader))}
	}
	if local == "" {
		return noStandby(cs, now)
	}
	m, ok := findMember(cs, local)
	switch {
	case !ok:
		return verdict{exitLocalBad, "this node " + local + " has no member record (is kha-supervisor running here?)"}
	case m.State == group.Fencing || m.State == group.Stopped || m.State == group.Fenced:
		return verdict{exitLocalBad, fmt.Sprintf("this node %s is %s", local, m.State)}
	case m.Cooldown.After(now):
		return verdict{exitLocalBad, fmt.Sprintf("this node %s is in cooldown after unit failures until %s", local, stamp(m.Cooldown))}
	}
	return noStandby(cs, now)
}

// noStandby is status's verdict on redundancy once the leader is fine: 10
// when no other member could take over, naming why for each.
func noStandby(cs group.ClusterStatus, now time.Time) verdict {
	if len(successors(cs, now)) > 0 {
		return verdict{exitOK, ""}
	}
	return verdict{exitNoStandby, "no member could take over from " + cs.Leader + ": " + whyNotEligible(cs, now)}
}

// whyNotEligible says, for each member other than the leader, why it
// could not take over.
func whyNotEligible(cs group.ClusterStatus, now time.Time) string {
	var out []string
	for _, m := range cs.Members {
		switch {
		case m.Node == cs.Leader:
			continue
		case banned(cs.Control, m.Node, now):
			out = append(out, m.Node+" is banned")
		case m.Cooldown.After(now):
			out = append(out, m.Node+" is in cooldown until "+stamp(m.Cooldown))
		case cs.Control.Freeze != nil:
			out = append(out, m.Node+" may not promote while the group is frozen")
		default:
			out = append(out, fmt.Sprintf("%s is %s, not standby", m.Node, m.State))
		}
	}
	if len(out) == 0 {
		return "no other member is registered"
	}
	return strings.Join(out, "; ")
}

func active(m group.Record) int {
	n := 0
	for _, u := range m.Units {
		if u.State == "active" {
			n++
		}
	}
	return n
}

func unitSummary(m group.Record) string {
	if len(m.Units) == 0 {
		return "-"
	}
	s := fmt.Sprintf("%d/%d active", active(m), len(m.Units))
	if n := unhealthy(m); n > 0 {
		s += fmt.Sprintf(", %d unhealthy", n)
	}
	return s
}

// unhealthy counts the units whose health probe fails ([health]).
func unhealthy(m group.Record) int {
	n := 0
	for _, u := range m.Units {
		if u.Health == health.StateUnhealthy {
			n++
		}
	}
	return n
}

// stamp is a wall-clock time for people: date, time and zone, local (TZ).
func stamp(t time.Time) string { return t.Local().Format("2006-01-02 15:04:05 MST") }

func printStatus(w io.Writer, cs group.ClusterStatus, now time.Time, wide bool) {
	leader := "none"
	if cs.Leader != "" {
		leader = fmt.Sprintf("%s (token %d, lease %s in etcd)", cs.Leader, cs.Token, leaseText(cs.LeaseLeft))
	}
	fmt.Fprintf(w, "cluster %s: leader %s\n", cs.Cluster, leader)
	if l := apiFenceClusterLine(cs); l != "" { // apifence.go
		fmt.Fprintln(w, l)
	}
	printControl(w, cs, now) // records.go
	if len(cs.Members) > 0 && len(eligible(cs, now, "")) == 0 {
		fmt.Fprintln(w, "WARNING: no member is eligible to run the units (every member is banned, in cooldown or not standby, or the group is frozen without an active leader)")
	} else if v := noStandby(cs, now); cs.Leader != "" && v.code != exitOK {
		fmt.Fprintf(w, "WARNING: %s; a failure of the leader leaves the units stopped\n", v.why)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOST\tROLE\tSTATE\tUNITS\tLEASE LEFT\tTOKEN\tRECORD AGE\tVERSION\tSINCE\tNOTE")
	for _, m := range cs.Members {
		fmt.Fprintln(tw, strings.Join(memberRow(cs, m, now, wide), "\t"))
	}
	_ = tw.Flush()
}

func memberRow(cs group.ClusterStatus, m group.Record, now time.Time, wide bool) []string {
	role := "standby"
	lease := "-"
	if m.Node == cs.Leader {
		role = "leader"
		lease = strings.TrimSuffix(leaseText(cs.LeaseLeft), " left") // live, from etcd; the record's figure is as old as the record
	}
	var notes []string
	if b, ok := cs.Control.Bans[m.Node]; ok {
		role += " BANNED"
		if !b.Until.IsZero() {
			notes = append(notes, "banned until "+stamp(b.Until))
		}
	}
	if m.Cooldown.After(now) {
		notes = append(notes, "cooldown until "+stamp(m.Cooldown))
	}
	if m.Reason != "" {
		notes = append(notes, m.Reason)
	}
	units := unitSummary(m)
	if wide {
		var us []string
		for _, u := range m.Units {
			s := strings.TrimSuffix(u.Name, ".service") + "=" + u.State
			if u.Health != "" {
				s += "/" + u.Health // the leader's probe: starting, healthy, unhealthy
			}
			us = append(us, s)
		}
		units = strings.Join(us, ",")
	}
	return []string{m.Node, orDash(m.Host), role, string(m.State), units, lease, tokenText(m.Token),
		age(now, m.Published), m.Version, now.Sub(m.Since).Round(time.Second).String() + " ago", strings.Join(notes, "; ")}
}

// leaseText is etcd's remaining TTL of the election lease: etcd answers
// TTL -1 for a lease that expired between reading the election key and
// asking, which is no "-1s left".
func leaseText(d time.Duration) string {
	if d < 0 {
		return "expired"
	}
	return d.String() + " left"
}

func tokenText(t int64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(100 * time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orAny(s string) string {
	if s == "" {
		return "any other member"
	}
	return s
}
