package main

import (
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// The leader's record carries its units' probe states; status counts the
// unhealthy ones and -o wide shows each.
func TestStatusShowsUnitHealth(t *testing.T) {
	now := time.Now()
	m := group.Record{Node: "m1", State: group.Active, Since: now, Published: now, Units: []group.UnitStatus{
		{Name: "kube-controller-manager.service", State: "active", Health: "healthy"},
		{Name: "kube-scheduler.service", State: "active", Health: "unhealthy"},
	}}
	cs := group.ClusterStatus{Leader: "m1"}
	row := strings.Join(memberRow(cs, m, now, false), " | ")
	if !strings.Contains(row, "2/2 active, 1 unhealthy") {
		t.Errorf("row %q: want the unhealthy unit counted", row)
	}
	wide := strings.Join(memberRow(cs, m, now, true), " | ")
	if !strings.Contains(wide, "kube-controller-manager=active/healthy,kube-scheduler=active/unhealthy") {
		t.Errorf("wide row %q: want each unit's probe state", wide)
	}
	m.Units[1].Health = ""
	if row := strings.Join(memberRow(cs, m, now, false), " | "); strings.Contains(row, "unhealthy") {
		t.Errorf("row %q without probes", row)
	}
}
