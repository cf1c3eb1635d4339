package main

import (
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// eligible lists, in name order, the members that could run the units at
// now without an operator's help, leaving out the member named without:
// the leader while it is active (or promoting), and every standby that is
// neither banned nor in cooldown. While the group is frozen nobody may
// promote, so only an active leader counts. This is the one definition
// that ban, handoff, drill and status apply.
func eligible(cs group.ClusterStatus, now time.Time, without string) []string {
	var out []string
	for _, m := range cs.Members {
		if m.Node == without || banned(cs.Control, m.Node, now) || m.Cooldown.After(now) {
			continue
		}
		leading := m.Node == cs.Leader && (m.State == group.Active || m.State == group.Promoting)
		standby := m.State == group.Standby && cs.Control.Freeze == nil
		if leading || standby {
			out = append(out, m.Node)
		}
	}
	return out
}

// banned reports a ban in force at now (one whose expiry passed is gone
// from etcd soon after, with its lease).
func banned(c group.Control, node string, now time.Time) bool {
	b, ok := c.Bans[node]
	return ok && (b.Until.IsZero() || b.Until.After(now))
}

// successors are the members that could take over from the leader.
func successors(cs group.ClusterStatus, now time.Time) []string {
	return eligible(cs, now, cs.Leader)
}

// names joins node names for a message: "m2", "m2 or m3".
func names(ns []string) string { return strings.Join(ns, " or ") }
