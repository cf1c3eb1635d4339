package plane

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

var t0 = time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestFiguresComeFromTheBindingsAfterTheFault(t *testing.T) {
	fault := at(1000)
	pods := []probe.Pod{
		{Name: "before", Created: at(900)}, // bound by the old leader after the fault: not "new"
		{Name: "a", Created: at(1200)},     // bound 5 s later by the new leader
		{Name: "b", Created: at(1400)},     // bound first of the new pods? no: a's binding is earlier
		{Name: "never", Created: at(9000)}, // unbound at the end
		{Name: "old", Created: at(-5000)},  // outside the window
	}
	bound := map[string]bind{
		"before": {at(1050), "m1"}, "a": {at(6200), "m2"}, "b": {at(6300), "m2"}, "old": {at(-4900), "m1"},
	}
	first, longest := firstBindAfter(pods, bound, fault, at(-1000), at(10000))
	if !first.Time.Equal(at(6200)) || first.Master != "m2" {
		t.Errorf("first new bind %v, want a's at +6.2 s by m2", first)
	}
	if longest != 5000*time.Millisecond {
		t.Errorf("longest unbound %s, want 5s (a: 1.2 -> 6.2 s; never: 9 -> 10 s)", longest)
	}
	ds := []probe.Deletion{{At: at(0), Replaced: at(300)}, {At: at(2000), Replaced: at(9000)}, {At: at(9500)}}
	if got := longestUnreplaced(ds, at(-1000), at(10000)); got != 7*time.Second {
		t.Errorf("longest unreplaced %s, want 7s", got)
	}
}

func TestTableGivesMedianSpreadAndRatio(t *testing.T) {
	var rs []report.Result
	for i, v := range []float64{4000, 5000, 9000} {
		rs = append(rs, report.Result{ID: 40, Name: "real: cut", Mode: "kha-fast", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{SchedMS: v, UnboundMS: v, CMMS: v}})
		rs = append(rs, report.Result{ID: 40, Name: "real: cut", Mode: "le-tuned", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{SchedMS: 2 * v, UnboundMS: 2 * v, CMMS: 2 * v}})
	}
	rs[0].Overlaps = []string{"x"}
	// A trial whose setup failed measured nothing: it is not a 0 s figure.
	rs = append(rs, report.Result{ID: 40, Name: "real: cut", Mode: "kha-fast", Repeat: 4, Problems: []string{"setup: x"}})
	var b bytes.Buffer
	WriteTable(&b, rs)
	out := b.String()
	for _, want := range []string{"| 40 cut | kha-fast | 4 | 5.00 s [4.00-9.00] | 5.00 s [4.00-9.00]", "1 intervals", "| 40 cut | le-tuned | 3 | 10.00 s [8.00-18.00]",
		"scenario 40, kha-fast / le-tuned: scheduler (longest pod unbound) 0.50, controller-manager 0.50"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestParseModesNamesTheChoices(t *testing.T) {
	ms, err := ParseModes("kha-fast,le-defaults")
	if err != nil || len(ms) != 2 || ms[0].LeaderElect || !ms[1].LeaderElect || ms[1].Lease != 0 {
		t.Fatalf("%v %v", ms, err)
	}
	if _, err := ParseModes("kha-fast,le-fast"); err == nil || !strings.Contains(err.Error(), "le-tuned") {
		t.Errorf("error %v, want one listing the modes", err)
	}
	if ms, err := ParseModes("le-8-6-1"); err != nil || len(ms) != 1 || !ms[0].LeaderElect || ms[0].Lease != 8*time.Second || ms[0].Renew != 6*time.Second || ms[0].Retry != time.Second {
		t.Errorf("le-8-6-1: %v, %v", ms, err)
	}
	for _, bad := range []string{"le-5-5-1", "le-5-3-3", "le-5-3-0"} {
		if _, err := ParseModes(bad); err == nil || !strings.Contains(err.Error(), "renew deadline") {
			t.Errorf("%s: %v, want client-go's timing relations named", bad, err)
		}
	}
	if ms, err := ParseModes("kha-fast-kill-ttl5s"); err != nil || len(ms) != 1 || ms[0].Profile.TTL != 5*time.Second || ms[0].Profile.Renew != 250*time.Millisecond {
		t.Errorf("kha-fast-kill-ttl5s: %+v, %v", ms, err)
	}
	for bad, want := range map[string]string{"kha-fast-kill-ttl5": "whole number", "kha-fast-kill-ttl4.3s": "whole number", "kha-fast-kill-ttl100ms": "renew interval", "kha-quick-ttl4s": "unknown profile"} {
		if _, err := ParseModes(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", bad, err, want)
		}
	}
	if m := Modes["le-tuned"]; m.Lease != 5*time.Second || m.Renew != 3*time.Second || m.Retry != time.Second {
		t.Errorf("le-tuned %v, want 5/3/1 s", m)
	}
}

// A kha-PROFILE-ttlD mode's supervisors are configured with lease.ttl D and
// the rest of the profile.
func TestTTLModeWritesItsTTL(t *testing.T) {
	l, err := lab.New(lab.Config{Prefix: "khttl", StateDir: t.TempDir(), Binary: "/bin/true", Profile: lab.FastKill})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := ParseModes("kha-fast-kill-ttl5s")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := (&Plane{Lab: l}).SupervisorLab(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	c := sl.SupervisorConfig("m1")
	if c.Lease.TTL != 5*time.Second || c.Lease.RenewInterval != 250*time.Millisecond || c.Units.StopTimeout != 100*time.Millisecond {
		t.Errorf("ttl %s renew %s stop %s, want 5s, fast-kill's 250ms and 100ms", c.Lease.TTL, c.Lease.RenewInterval, c.Units.StopTimeout)
	}
	if c.FromProfileKey("lease.ttl") || !c.FromProfileKey("lease.renew_interval") {
		t.Errorf("keys marked as the profile's: %v; want lease.ttl not among them, lease.renew_interval among them", c.FromProfile)
	}
}

// The lease holder's figure reads a deposed leader's binding at a heal as
// what it is: the master leading at the end binds later.
func TestHolderFigureSkipsADeposedLeadersBinding(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	trial := func(leader, newLeader string, sched float64, other *float64) report.Result {
		r := report.Result{ID: 69, Name: "real: flaps", Mode: "le-tuned", Leader: leader, NewLeader: newLeader, FaultAt: t0, Pass: true}
		r.SchedMS = sched
		r.Handoff = map[string]report.ResourceHandoff{"kube-scheduler": {FirstOtherMS: other}}
		return r
	}
	results := []report.Result{
		trial("m1", "m1", 3100, nil),      // rode the flaps: its own binding
		trial("m1", "m2", 3200, ms(9100)), // bound at the heal, then lost the Lease: m2 at 9.1 s
		trial("m1", "m2", 4700, ms(4600)), // a takeover: m2's first write
		trial("m1", "m2", 3300, nil),      // m2 never wrote: no figure
		trial("m1", "m1", 0, nil),         // nothing bound: no figure
		trial("m1", "m2", 3150, ms(8900)), // deposed again
	}
	gs := Groups(results)
	if len(gs) != 1 {
		t.Fatalf("%d groups, want 1", len(gs))
	}
	g := gs[0]
	if g.Holder.N != 4 || g.Holder.Median != (4600+8900)/2 {
		t.Errorf("holder figure: %d trials, median %.0f ms; want 4 trials (3.1, 4.6, 8.9, 9.1 s), median 6750 ms", g.Holder.N, g.Holder.Median)
	}
	if g.Sched.Median >= g.Holder.Median {
		t.Errorf("scheduler back %.0f ms, holder %.0f ms: the deposed leader's bindings should make scheduler back the earlier", g.Sched.Median, g.Holder.Median)
	}
}
