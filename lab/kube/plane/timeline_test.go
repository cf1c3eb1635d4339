package plane

import (
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func TestTimelineGivesMedianAndSpreadPerEventAndMode(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	trial := func(mode string, rep int, evict float64, withAck bool) report.Result {
		active, other := "m1", "m2"
		if rep == 2 { // the other side faulted: named by role, the rows are the same
			active, other = "m2", "m1"
		}
		f := t0.Add(time.Duration(rep) * time.Hour)
		at := func(s float64) time.Time { return f.Add(time.Duration(s * float64(time.Second))) }
		r := report.Result{ID: 50, Mode: mode, Repeat: rep, FaultAt: f, Leader: active, NewLeader: other, Pass: true,
			Timeline: []Mark{
				{Key: "evicted", At: at(evict), Label: "P1 evicted", Owner: OwnerKube, Source: "audit log of " + other},
				{Key: "promoting", At: at(6), Label: other + " wins", Owner: OwnerKha, Source: "journal of " + other},
			}, RealPlane: report.RealPlane{Facts: []string{"P2 untouched"}}}
		if withAck {
			r.Timeline = append(r.Timeline, Mark{Key: "ack", At: at(100), Label: "ack", Owner: OwnerKube, Source: "audit"})
		}
		return r
	}
	rs := []report.Result{trial("kha-fast", 1, 88, true), trial("kha-fast", 2, 90, false), trial("kha-fast", 3, 86, true),
		trial("kha-default", 1, 95, true), {ID: 40, Mode: "kha-fast"}}
	var b strings.Builder
	if err := WriteTimeline(&b, rs, 50); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Mode kha-fast, 3 trials:",
		"| 6.00 s [6.00-6.00] (3) | M2 wins | kha-supervisor | journal of M2 |",
		"| 88.00 s [86.00-90.00] (3) | P1 evicted | Kubernetes | audit log of M2 |",
		"| 100.00 s [100.00-100.00] (2) | ack (in 2 of 3 trials) |",
		"Mode kha-default, 1 trials:",
		"| 95.00 s | P1 evicted |",
		"- P2 untouched",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "M2 wins") > strings.Index(out, "P1 evicted") {
		t.Errorf("rows not in the order of their median:\n%s", out)
	}
	if got := Roles("m2").Name("web-585b5bcf48-4zxm2 on w2, journal of m1 (rack r2)"); got != "web-585b5bcf48-4zxm2 on W1, journal of M2 (rack R1)" {
		t.Errorf("roles: %q", got)
	}
	if err := WriteTimeline(&b, rs, 41); err == nil {
		t.Error("a scenario without a timeline gave no error")
	}
}
