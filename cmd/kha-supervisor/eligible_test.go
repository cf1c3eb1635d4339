package main

import (
	"slices"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// TestEligible is the table of who could run the units (issue 9, item 3).
func TestEligible(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := func(node string, st supervisor.State) supervisor.Record {
		return supervisor.Record{Node: node, State: st}
	}
	cooling := rec("m2", supervisor.Standby)
	cooling.Cooldown = now.Add(time.Minute)
	cooled := rec("m2", supervisor.Standby)
	cooled.Cooldown = now.Add(-time.Second)
	two := []supervisor.Record{rec("m1", supervisor.Active), rec("m2", supervisor.Standby)}
	ban := func(nodes ...string) map[string]supervisor.Ban {
		b := map[string]supervisor.Ban{}
		for _, n := range nodes {
			b[n] = supervisor.Ban{Node: n}
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		cs      supervisor.ClusterStatus
		without string
		want    []string
	}{
		{"leader and standby", supervisor.ClusterStatus{Leader: "m1", Members: two}, "", []string{"m1", "m2"}},
		{"without the leader", supervisor.ClusterStatus{Leader: "m1", Members: two}, "m1", []string{"m2"}},
		{"without the standby", supervisor.ClusterStatus{Leader: "m1", Members: two}, "m2", []string{"m1"}},
		{"standby banned", supervisor.ClusterStatus{Leader: "m1", Members: two, Control: supervisor.Control{Bans: ban("m2")}}, "m1", nil},
		{"expired ban", supervisor.ClusterStatus{Leader: "m1", Members: two, Control: supervisor.Control{Bans: map[string]supervisor.Ban{
			"m2": {Node: "m2", Until: now.Add(-time.Second)}}}}, "m1", []string{"m2"}},
		{"ban in force", supervisor.ClusterStatus{Leader: "m1", Members: two, Control: supervisor.Control{Bans: map[string]supervisor.Ban{
			"m2": {Node: "m2", Until: now.Add(time.Hour)}}}}, "m1", nil},
		{"standby in cooldown", supervisor.ClusterStatus{Leader: "m1", Members: []supervisor.Record{rec("m1", supervisor.Active), cooling}}, "m1", nil},
		{"cooldown over", supervisor.ClusterStatus{Leader: "m1", Members: []supervisor.Record{rec("m1", supervisor.Active), cooled}}, "m1", []string{"m2"}},
		{"frozen: standbys may not promote", supervisor.ClusterStatus{Leader: "m1", Members: two, Control: supervisor.Control{Freeze: &supervisor.Freeze{}}}, "", []string{"m1"}},
		{"frozen without a leader", supervisor.ClusterStatus{Members: []supervisor.Record{rec("m2", supervisor.Standby)}, Control: supervisor.Control{Freeze: &supervisor.Freeze{}}}, "", nil},
		{"demoting leader", supervisor.ClusterStatus{Leader: "m1", Members: []supervisor.Record{rec("m1", supervisor.Demoting), rec("m2", supervisor.Standby)}}, "", []string{"m2"}},
		{"fencing and starting members", supervisor.ClusterStatus{Members: []supervisor.Record{rec("m1", supervisor.Fencing), rec("m2", supervisor.Starting)}}, "", nil},
		{"active record without the key", supervisor.ClusterStatus{Leader: "m2", Members: []supervisor.Record{rec("m1", supervisor.Active), rec("m2", supervisor.Promoting)}}, "", []string{"m2"}},
		{"no members", supervisor.ClusterStatus{}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := eligible(tc.cs, now, tc.without); !slices.Equal(got, tc.want) {
				t.Errorf("eligible(without %q) = %v, want %v", tc.without, got, tc.want)
			}
		})
	}
}
