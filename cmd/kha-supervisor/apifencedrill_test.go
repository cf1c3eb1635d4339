package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestDrillTimelineShowsTheTokenHandover: in token mode the timeline has
// the handover between the lease won and the units active, and the drill
// fails without it, with another term's token, or out of order.
func TestDrillTimelineShowsTheTokenHandover(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	base := timeline{requested: t0, oldNode: "m1", newNode: "m2", oldStopped: t0.Add(time.Second),
		leaseWon: t0.Add(2 * time.Second), unitsActive: t0.Add(3 * time.Second)}
	ok := base
	ok.handover = apiHandover{mode: "token", token: 102, got: 102, at: t0.Add(2500 * time.Millisecond), took: 180 * time.Millisecond}
	if bad := ok.check(0); len(bad) != 0 {
		t.Errorf("good drill: %v", bad)
	}
	var out bytes.Buffer
	ok.print(&out)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[3], "+2.500s  m2: token 102 handed over to the apiservers (confirmed on every one in 180ms)") ||
		!strings.Contains(lines[4], "new units active") {
		t.Errorf("timeline:\n%s", out.String())
	}
	for name, c := range map[string]struct {
		h    apiHandover
		want string
	}{
		"missing":      {apiHandover{mode: "token", token: 102}, "no record of m2's token handover"},
		"other term":   {apiHandover{mode: "token", token: 102, got: 101, at: t0.Add(2500 * time.Millisecond)}, "handed over token 101, not its term's 102"},
		"before lease": {apiHandover{mode: "token", token: 102, got: 102, at: t0.Add(time.Second)}, "before it won the lease"},
		"after units":  {apiHandover{mode: "token", token: 102, got: 102, at: t0.Add(4 * time.Second)}, "before its token handover"},
	} {
		tl := base
		tl.handover = c.h
		if bad := tl.check(0); len(bad) != 1 || !strings.Contains(bad[0], c.want) {
			t.Errorf("%s: %v, want %q", name, bad, c.want)
		}
	}
	off := base // fence off or gate mode: no line, no verdict
	off.handover = apiHandover{mode: "gate"}
	out.Reset()
	off.print(&out)
	if bad := off.check(0); len(bad) != 0 || strings.Contains(out.String(), "handed over") {
		t.Errorf("gate mode: %v\n%s", bad, out.String())
	}
}
