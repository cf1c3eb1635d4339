package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

func init() {
	register("status", "show the leader and every member, from etcd [--json]", statusCmd)
}

func statusCmd(e env, args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	s, code := connect(e, fs, args)
	if code != exitOK {
		return code
	}
	defer s.close()
	cs, err := s.cluster(e)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(cs)
		return exitOK
	}
	printStatus(e.stdout, cs, time.Now())
	return exitOK
}

func printStatus(w io.Writer, cs supervisor.ClusterStatus, now time.Time) {
	leader := "none"
	if cs.Leader != "" {
		leader = fmt.Sprintf("%s (token %d, lease %s left in etcd)", cs.Leader, cs.Token, cs.LeaseLeft)
	}
	fmt.Fprintf(w, "cluster %s: leader %s\n", cs.Cluster, leader)
	if f := cs.Control.Freeze; f != nil {
		fmt.Fprintf(w, "*** FROZEN (maintenance) since %s by %s: %s — no promotion, no handoff; fencing stays armed ***\n",
			f.At.Format(time.RFC3339), f.By, f.Reason)
	}
	if h := cs.Control.Handoff; h != nil {
		fmt.Fprintf(w, "handoff %s under way: from %s to %s\n", h.ID, h.From, orAny(h.To))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tUNITS\tLEASE LEFT\tTOKEN\tVERSION\tSINCE\tREASON")
	for _, m := range cs.Members {
		role := "standby"
		if m.Node == cs.Leader {
			role = "leader"
		}
		if b, ok := cs.Control.Bans[m.Node]; ok {
			role += " BANNED"
			if !b.Until.IsZero() {
				role += " until " + b.Until.Format("15:04:05")
			}
		}
		var units []string
		for _, u := range m.Units {
			units = append(units, strings.TrimSuffix(u.Name, ".service")+"="+u.State)
		}
		lease, token := "-", "-"
		if m.State.Holding() {
			lease = (time.Duration(m.LeaseLeftMS) * time.Millisecond).String()
			token = fmt.Sprint(m.Token)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s ago\t%s\n", m.Node, role, m.State, strings.Join(units, ","),
			lease, token, m.Version, now.Sub(m.Since).Round(time.Second), m.Reason)
	}
	_ = tw.Flush()
}

func orAny(s string) string {
	if s == "" {
		return "any other member"
	}
	return s
}
