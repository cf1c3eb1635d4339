package main

import (
	"slices"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// TestEligible is the table of who could run the units (issue 9, item 3).
func TestEligible(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := func(node string, st group.State) group.Record {
		return group.Record{Node: node, State: st}
	}
	cooling := rec("m2", group.Standby)
	cooling.Cooldown = now.Add(time.Minute)
	cooled := rec("m2", group.Standby)
	cooled.Cooldown = now.Add(-time.Second)
	two := []group.Record{rec("m1", group.Active), rec("m2", group.Standby)}
	ban := func(nodes ...string) map[string]group.Ban {
		b := map[string]group.Ban{}
		for _, n := range nodes {
			b[n] = group.Ban{Node: n}
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		cs      group.ClusterStatus
		without string
		want    []string
	}{
		{"leader and standby", group.ClusterStatus{Leader: "m1", Members: two}, "", []string{"m1", "m2"}},
		{"without the leader", group.ClusterStatus{Leader: "m1", Members: two}, "m1", []string{"m2"}},
		{"without the standby", group.ClusterStatus{Leader: "m1", Members: two}, "m2", []string{"m1"}},
		{"standby banned", group.ClusterStatus{Leader: "m1", Members: two, Control: group.Control{Bans: ban("m2")}}, "m1", nil},
		{"expired ban", group.ClusterStatus{Leader: "m1", Members: two, Control: group.Control{Bans: map[string]group.Ban{
			"m2": {Node: "m2", Until: now.Add(-time.Second)}}}}, "m1", []string{"m2"}},
		{"ban in force", group.ClusterStatus{Leader: "m1", Members: two, Control: group.Control{Bans: map[string]group.Ban{
			"m2": {Node: "m2", Until: now.Add(time.Hour)}}}}, "m1", nil},
		{"standby in cooldown", group.ClusterStatus{Leader: "m1", Members: []group.Record{rec("m1", group.Active), cooling}}, "m1", nil},
		{"cooldown over", group.ClusterStatus{Leader: "m1", Members: []group.Record{rec("m1", group.Active), cooled}}, "m1", []string{"m2"}},
		{"frozen: standbys may not promote", group.ClusterStatus{Leader: "m1", Members: two, Control: group.Control{Freeze: &group.Freeze{}}}, "", []string{"m1"}},
		{"frozen without a leader", group.ClusterStatus{Members: []group.Record{rec("m2", group.Standby)}, Control: group.Control{Freeze: &group.Freeze{}}}, "", nil},
		{"demoting leader", group.ClusterStatus{Leader: "m1", Members: []group.Record{rec("m1", group.Demoting), rec("m2", group.Standby)}}, "", []string{"m2"}},
		{"fencing and starting members", group.ClusterStatus{Members: []group.Record{rec("m1", group.Fencing), rec("m2", group.Starting)}}, "", nil},
		{"active record without the key", group.ClusterStatus{Leader: "m2", Members: []group.Record{rec("m1", group.Active), rec("m2", group.Promoting)}}, "", []string{"m2"}},
		{"no members", group.ClusterStatus{}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eligible(tc.cs, now, tc.without); !slices.Equal(got, tc.want) {
				t.Errorf("eligible(without %q) = %v, want %v", tc.without, got, tc.want)
			}
		})
	}
}
