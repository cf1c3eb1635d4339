package main

import (
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// TestTermOf: the gates forward only for an active (or promoting, past the
// barrier) member with units allowed, a token, and time before fence_at.
func TestTermOf(t *testing.T) {
	open := supervisor.Status{State: group.Active, UnitsAllowed: true, Token: 9, FenceIn: time.Second}
	if tm := termOf(open); !tm.Open || tm.Token != 9 {
		t.Errorf("active: %+v, want open with token 9", tm)
	}
	for name, st := range map[string]supervisor.Status{
		"standby":         {State: group.Standby, Leader: "m2", LeaderToken: 11},
		"before barrier":  {State: group.Promoting, Token: 9, FenceIn: time.Second},
		"fence at passed": {State: group.Active, UnitsAllowed: true, Token: 9, FenceIn: -time.Millisecond},
		"fencing":         {State: group.Fencing, UnitsAllowed: true, Token: 9, FenceIn: time.Second},
		"demoting":        {State: group.Demoting, UnitsAllowed: true, Token: 9, FenceIn: time.Second},
		"no token":        {State: group.Active, UnitsAllowed: true, FenceIn: time.Second},
	} {
		if tm := termOf(st); tm.Open || tm.Reason == "" {
			t.Errorf("%s: %+v, want closed with a reason", name, tm)
		}
	}
}
