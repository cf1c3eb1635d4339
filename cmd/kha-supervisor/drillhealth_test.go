package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// With [health] probes the drill's timeline ends at "new units healthy",
// and --expect-within is judged there.
func TestDrillTimelineEndsHealthy(t *testing.T) {
	t0 := time.Now()
	tl := timeline{requested: t0, oldNode: "m1", newNode: "m2", oldStopped: t0.Add(time.Second),
		leaseWon: t0.Add(2 * time.Second), unitsActive: t0.Add(3 * time.Second),
		health: drillHealth{probed: []string{"kube-scheduler.service"}, healthy: t0.Add(5 * time.Second)}}
	var b bytes.Buffer
	tl.print(&b)
	if !strings.Contains(b.String(), "+5.000s  m2: new units healthy") {
		t.Fatalf("timeline:\n%s", b.String())
	}
	if bad := tl.check(6 * time.Second); len(bad) != 0 {
		t.Fatalf("within 6s: %v", bad)
	}
	if bad := tl.check(4 * time.Second); len(bad) != 1 || !strings.Contains(bad[0], "took 5s") {
		t.Fatalf("healthy at 5s, expected within 4s: %v", bad)
	}
	tl.health.healthy = time.Time{}
	if bad := tl.check(0); len(bad) != 1 || !strings.Contains(bad[0], "becoming healthy") {
		t.Fatalf("never healthy: %v", bad)
	}
	tl.health = drillHealth{}
	b.Reset()
	tl.print(&b)
	if strings.Contains(b.String(), "healthy") || len(tl.check(4*time.Second)) != 0 {
		t.Fatalf("without probes the timeline ends at active:\n%s", b.String())
	}
}

func TestAllHealthy(t *testing.T) {
	r := group.Record{Units: []group.UnitStatus{{Name: "a.service", State: "active", Health: "healthy"}, {Name: "b.service", State: "active"}}}
	if !allHealthy(r, []string{"a.service"}) || allHealthy(r, []string{"a.service", "b.service"}) {
		t.Fatal("allHealthy")
	}
}

// The timeline shows the new leader's promotion steps, read from its
// units_started event; an older daemon's event has none and prints none.
func TestDrillTimelineShowsThePromotionSteps(t *testing.T) {
	t0 := time.Now()
	tl := timeline{requested: t0, oldNode: "m1", newNode: "m2", oldStopped: t0.Add(time.Second),
		leaseWon: t0.Add(2 * time.Second), unitsActive: t0.Add(3 * time.Second),
		steps: promotionSteps("units started (replay 1ms, barrier 12ms, start 310ms)")}
	var b bytes.Buffer
	tl.print(&b)
	if !strings.Contains(b.String(), "m2: promotion steps: replay 1ms, barrier 12ms, start 310ms\n") {
		t.Fatalf("timeline:\n%s", b.String())
	}
	if got := promotionSteps("units started"); got != "" {
		t.Errorf("an older daemon's reason: %q, want no steps", got)
	}
}
