package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// A request to the leader that has not stepped down yet is refused (exit
// 2) naming it, its age, who asked and its expiry; one whose leader has
// stepped down may be replaced.
func TestRefuseHandoffWhilePending(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	h := &group.Handoff{ID: "h1", From: "m1", To: "m2", Token: 7, At: now.Add(-12 * time.Second), Expires: now.Add(30 * time.Second), By: "alice@m3", Reason: "patching"}
	cs := group.ClusterStatus{Leader: "m1", Token: 7, Control: group.Control{Handoff: h},
		Members: []group.Record{{Node: "m1", State: group.Active}, {Node: "m2", State: group.Standby}, {Node: "m3", State: group.Standby}}}
	var out bytes.Buffer
	e := env{ctx: context.Background(), stdout: &out, stderr: &out}
	if code := refuseHandoff(e, cs, "m3", now); code != exitConfig {
		t.Fatalf("pending request: exit %d, want %d: %q", code, exitConfig, out.String())
	}
	for _, want := range []string{"handoff h1 requested 12s ago by alice@m3 (patching)", "m1 (token 7) steps down for m2", "expires in 30s", "handoff --cancel"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("refusal lacks %q: %q", want, out.String())
		}
	}
	out.Reset()
	cs.Leader, cs.Token = "m2", 9 // h1 was fulfilled: its leadership is over
	cs.Members[0].State, cs.Members[1].State = group.Standby, group.Active
	if code := refuseHandoff(e, cs, "m3", now); code != exitOK {
		t.Fatalf("spent request: exit %d: %q", code, out.String())
	}
	if got := handoffText(*h, cs, now); !strings.Contains(got, "m1 (token 7) stepped down; only m2 may campaign") {
		t.Fatalf("spent request shown as %q", got)
	}
	// A request written by an older version has no recorded expiry.
	old := *h
	old.Expires, old.By, old.Reason = time.Time{}, "", ""
	if got := handoffText(old, cs, now); !strings.Contains(got, "expiry not recorded") || strings.Contains(got, "0001") {
		t.Fatalf("older request shown as %q", got)
	}
}

// The default expiry is the longest a clean switchover takes with the
// configuration's timings: the shipped defaults give about a minute.
func TestHandoffExpiry(t *testing.T) {
	c := config.Default()
	c.Lease.TTL, c.Lease.TakeoverDelay = 10*time.Second, time.Second
	c.Units.Managed = []string{"a.service", "b.service"}
	c.Units.StopTimeout, c.Units.KillGrace, c.Units.StartTimeout = 5*time.Second, 2*time.Second, 10*time.Second
	if got, want := handoffExpiry(c), 11*time.Second+2*17*time.Second; got != want {
		t.Fatalf("expiry %s, want %s", got, want)
	}
	c.Hooks.OnDemote, c.Hooks.Timeout = []string{"/bin/true"}, 10*time.Second
	if got, want := handoffExpiry(c), 55*time.Second; got != want {
		t.Fatalf("expiry with an on_demote hook %s, want %s", got, want)
	}
	if d := handoffExpiry(config.Default()); d < 30*time.Second || d > 5*time.Minute {
		t.Fatalf("default expiry %s: not about a minute", d)
	}
	t.Logf("default handoff expiry with the shipped configuration: %s", handoffExpiry(config.Default()))
}
