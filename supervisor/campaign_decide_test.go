package supervisor

import (
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

func TestDecideCampaign(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	standby := func(n string) group.Record { return group.Record{Node: n, State: group.Standby} }
	cooling := group.Record{Node: "m2", State: group.Standby, Cooldown: later}
	base := func() campaignView {
		return campaignView{Self: "m1", UnitsSeen: true, DropinsOK: true, Members: map[string]group.Record{"m1": standby("m1"), "m2": standby("m2")}}
	}
	cases := []struct {
		name            string
		edit            func(*campaignView)
		allowed, overri bool
	}{
		{"eligible", func(*campaignView) {}, true, false},
		{"frozen", func(v *campaignView) { v.Ctl.Freeze = &group.Freeze{} }, false, false},
		{"banned", func(v *campaignView) { v.Ctl.Bans = map[string]group.Ban{"m1": {}} }, false, false},
		{"handoff to another", func(v *campaignView) { v.Ctl.Handoff = &group.Handoff{To: "m2"} }, false, false},
		{"handoff from us", func(v *campaignView) { v.Ctl.Handoff = &group.Handoff{From: "m1"} }, false, false},
		{"handoff from us, a newer leadership seen since", func(v *campaignView) {
			v.Ctl.Handoff = &group.Handoff{From: "m1", Token: 5}
			v.NewestToken = 9
		}, true, false},
		{"handoff from us, its leadership the newest seen", func(v *campaignView) {
			v.Ctl.Handoff = &group.Handoff{From: "m1", Token: 9}
			v.NewestToken = 9
		}, false, false},
		{"units not seen", func(v *campaignView) { v.UnitsSeen = false }, false, false},
		{"drop-ins not in order", func(v *campaignView) { v.DropinsOK = false }, false, false},
		{"a unit runs here", func(v *campaignView) { v.UnitsRunning = []string{"u"} }, false, false},
		{"cooldown, other standby eligible", func(v *campaignView) { v.CooldownUntil = later }, false, false},
		{"cooldown, other in cooldown too", func(v *campaignView) { v.CooldownUntil = later; v.Members["m2"] = cooling }, true, true},
		{"cooldown, other banned", func(v *campaignView) {
			v.CooldownUntil = later
			v.Ctl.Bans = map[string]group.Ban{"m2": {}}
		}, true, true},
		{"cooldown, other stopped", func(v *campaignView) {
			v.CooldownUntil = later
			v.Members["m2"] = group.Record{Node: "m2", State: group.Stopped}
		}, true, true},
		{"cooldown, other's units run", func(v *campaignView) {
			v.CooldownUntil = later
			v.Members["m2"] = group.Record{Node: "m2", State: group.Standby, UnitsRunning: true}
		}, true, true},
		{"cooldown, alone", func(v *campaignView) { v.CooldownUntil = later; delete(v.Members, "m2") }, true, true},
		{"cooldown, members not read yet", func(v *campaignView) { v.CooldownUntil = later; v.Members = nil }, false, false},
		{"cooldown over", func(v *campaignView) { v.CooldownUntil = now }, true, false},
		{"frozen beats the override", func(v *campaignView) {
			v.CooldownUntil = later
			v.Members = map[string]group.Record{}
			v.Ctl.Freeze = &group.Freeze{}
		}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := base()
			c.edit(&v)
			d := decideCampaign(now, v)
			if d.Allowed != c.allowed || d.Override != c.overri || d.Why == "" {
				t.Fatalf("got %+v, want allowed %v override %v (with a reason)", d, c.allowed, c.overri)
			}
		})
	}
}
