package scenario

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	packaging "github.com/kha-supervisor/kha-supervisor/packaging/mkpkg/build"
)

var t0 = time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// round builds one probe round: code per node (0: no answer), sent at ms.
func round(ms, m1, m2 int) leaderRound {
	s := func(node string, code int) leaderSample {
		x := leaderSample{Node: node, Sent: at(ms), Recv: at(ms + 2), Code: code}
		if code == 0 {
			x.Err = "connection refused"
		}
		return x
	}
	return leaderRound{s("m1", m1), s("m2", m2)}
}

func TestJudgeLeaderRounds(t *testing.T) {
	fault, settled := at(1000), at(3000)
	good := []leaderRound{
		round(0, 200, 503), round(500, 200, 503), // before the fault
		round(1100, 200, 503), round(1500, 503, 503), round(2000, 0, 503), // fencing, restarting
		round(2500, 0, 200), round(3100, 0, 200), round(3500, 503, 200), // after
	}
	v := judgeLeaderRounds(good, fault, settled, "m1", "m2")
	if len(v.Problems) != 0 {
		t.Fatalf("clean failover judged bad: %v", v.Problems)
	}
	if v.Before != 2 || v.After != 2 || !v.LastOld.Equal(at(1102)) || !v.FirstNew.Equal(at(2502)) {
		t.Errorf("verdict %+v", v)
	}

	for _, tc := range []struct {
		name   string
		rounds []leaderRound
		want   string
	}{
		{"two 200s at once", []leaderRound{round(0, 200, 503), round(1500, 200, 200), round(3100, 503, 200)}, "all answered 200"},
		{"no leader before the fault", []leaderRound{round(0, 503, 503), round(3100, 503, 200)}, "before the fault"},
		{"no answer before the fault", []leaderRound{round(0, 0, 503), round(3100, 503, 200)}, "before the fault"},
		{"wrong leader after", []leaderRound{round(0, 200, 503), round(3100, 200, 503)}, "after the failover"},
		{"old leader back after the new one", []leaderRound{round(0, 200, 503), round(2000, 503, 200), round(2500, 200, 503), round(3100, 503, 200)}, "after m2 had"},
		{"nothing after", []leaderRound{round(0, 200, 503)}, "too few rounds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeLeaderRounds(tc.rounds, fault, settled, "m1", "m2")
			if !strings.Contains(strings.Join(v.Problems, "\n"), tc.want) {
				t.Errorf("problems %q, want one containing %q", v.Problems, tc.want)
			}
		})
	}
}

// Output as `kha-supervisor drill` printed it in the lab.
const drillOut = `failover drill 10266995012a: asked m2 (token 147) to fence as if its renewals had failed; the others must wait out its lease (4s)
drill failover: m2 -> m1
      +0.000s  request
      +0.205s  m2: old units stopped
      +4.662s  m1: lease won
      +5.064s  m1: new units active
FAIL: took 5.064s, more than the expected 100ms`

func TestParseDrill(t *testing.T) {
	d, ok := parseDrill(drillOut)
	if !ok {
		t.Fatal("not parsed")
	}
	want := drillTimeline{Old: "m2", New: "m1", Stopped: 0.205, Won: 4.662, Active: 5.064, HasStopped: true, HasWon: true, HasA: true}
	if d != want {
		t.Errorf("got %+v, want %+v", d, want)
	}
	missing := strings.Replace(drillOut, "     +4.662s  m1: lease won", "  (missing)  m1: lease won", 1)
	if d, _ := parseDrill(missing); d.HasWon || !d.HasA {
		t.Errorf("a missing step: %+v", d)
	}
	if _, ok := parseDrill("kha-supervisor: refused: the group is frozen"); ok {
		t.Error("a refusal parsed as a timeline")
	}
}

func TestBumpVersion(t *testing.T) {
	testenv.RequireCommands(t, "dpkg")
	for _, tc := range []struct{ in, want string }{
		{"0.1.0", "0.1.0+up1"},
		{"0.0.0+71.gd65a06b25c36", "0.0.0+71.gd65a06b25c36.up1"},
		{"0.0.0+71.gd65a06b25c36.dirty", "0.0.0+71.gd65a06b25c36.dirty.up1"},
		{"0.2.0~rc.1", "0.2.0~rc.1+up1"},
		{"0.0.0+71.gd65a06b25c36.up1", "0.0.0+71.gd65a06b25c36.up2"},
		{"0.1.0+up9", "0.1.0+up10"},
	} {
		got := bumpVersion(tc.in)
		if got != tc.want {
			t.Errorf("bumpVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if err := packaging.CheckVersion(got); err != nil {
			t.Errorf("bumpVersion(%q): %v", tc.in, err)
		}
		if out, err := exec.Command("dpkg", "--compare-versions", got, "gt", tc.in).CombinedOutput(); err != nil {
			t.Errorf("dpkg does not order %s after %s: %v %s", got, tc.in, err, out)
		}
	}
}

func TestHookLog(t *testing.T) {
	env := map[string]string{"KHA_NODE": "m1", "KHA_CLUSTER": "lab", "KHA_ROLE": "promoting", "KHA_FENCING_TOKEN": "42"}
	ev, err := HookEventFromEnv("on_promote", func(k string) string { return env[k] }, at(5))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hooks.log")
	if err := AppendHookLine(path, ev); err != nil {
		t.Fatal(err)
	}
	if err := AppendHookLine(path, HookEvent{Event: "on_fence", Node: "m2", At: at(9)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := ReadHookLog(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b HookEvent) bool {
		return a.Event == b.Event && a.Node == b.Node && a.Cluster == b.Cluster && a.Role == b.Role && a.Token == b.Token && a.At.Equal(b.At)
	}
	if len(evs) != 2 || !same(evs[0], ev) || evs[1].Node != "m2" || evs[1].Role != "" || !evs[1].At.Equal(at(9)) {
		t.Errorf("read back %+v from %q", evs, b)
	}
	if _, err := HookEventFromEnv("on_fence", func(k string) string { return map[string]string{"KHA_FENCING_TOKEN": "x"}[k] }, t0); err == nil {
		t.Error("a non-numeric token was accepted")
	}
	if _, err := ReadHookLog(strings.NewReader("on_fence m1 lab\n")); err == nil {
		t.Error("a short line was accepted")
	}
}

func TestHookCheck(t *testing.T) {
	evs := []HookEvent{
		{Event: "on_promote", Node: "m1", Cluster: "lab", Role: "promoting", Token: 7, At: at(10)},   // before Since
		{Event: "on_demote", Node: "m1", Cluster: "lab", Role: "demoting", Token: 7, At: at(120)},    // after its units' last beats
		{Event: "on_promote", Node: "m2", Cluster: "lab", Role: "promoting", Token: 8, At: at(150)},  // a promotion that failed
		{Event: "on_promote", Node: "m2", Cluster: "lab", Role: "promoting", Token: 9, At: at(200)},  // before the new units
		{Event: "on_promote", Node: "m2", Cluster: "lab", Role: "promoting", Token: 9, At: at(2000)}, // a later one, ignored
	}
	units := func(a, b int) map[string]time.Time {
		return map[string]time.Time{"kube-controller-manager": at(a), "kube-scheduler": at(b)}
	}
	ok := []hookCheck{
		{Phase: "handoff", Event: "on_demote", Node: "m1", Token: 7, Since: at(100), After: units(110, 100)},
		{Phase: "handoff", Event: "on_promote", Node: "m2", Token: 9, Since: at(100), Before: units(250, 300)},
	}
	for _, c := range ok {
		if ev, bad := c.judge(evs); ev == nil || len(bad) > 0 {
			t.Errorf("%s %s: %v", c.Event, c.Node, bad)
		}
	}
	if got := ok[0].margin(evs[1]); got != 10 {
		t.Errorf("on_demote margin %.1f ms, want 10", got)
	}
	if got := ok[1].margin(evs[3]); got != 50 {
		t.Errorf("on_promote margin %.1f ms, want 50", got)
	}
	if got := ok[1].metricName(); got != "handoff_promote_before_units" {
		t.Errorf("metric name %q", got)
	}
	for _, tc := range []struct {
		c    hookCheck
		want string
	}{
		{hookCheck{Event: "on_demote", Node: "m1", Token: 7, Since: at(100), After: units(130, 100)}, "before the last heartbeat"},
		{hookCheck{Event: "on_promote", Node: "m2", Token: 9, Since: at(100), Before: units(150, 300)}, "after the first heartbeat"},
		{hookCheck{Event: "on_promote", Node: "m2", Token: 8, Since: at(100), Before: units(250, 300)}, "status said 8"},
		{hookCheck{Event: "on_promote", Node: "m2", Token: 9, Since: at(100), Before: units(180, 300)}, "KHA_FENCING_TOKEN 8, status said 9"},
		{hookCheck{Event: "on_promote", Node: "m2", Token: 9, Since: at(100), Before: map[string]time.Time{"kube-scheduler": at(300)}}, "not every unit"},
		{hookCheck{Event: "on_fence", Node: "m2", Token: 9, Since: at(100), After: units(1, 1)}, "no on_fence hook"},
	} {
		if _, bad := tc.c.judge(evs); !strings.Contains(strings.Join(bad, "\n"), tc.want) {
			t.Errorf("%s %s: problems %q, want one containing %q", tc.c.Event, tc.c.Node, bad, tc.want)
		}
	}
}

func TestReportKind(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
	}{
		{OperatorIDs(), "operator"},
		{[]int{16}, "operator"},
		{[]int{1, 16}, "matrix"},
		{CISubset(), "matrix"},
		{nil, "matrix"},
	} {
		if got := reportKind(tc.ids); got != tc.want {
			t.Errorf("reportKind(%v) = %q, want %q", tc.ids, got, tc.want)
		}
	}
	for _, id := range OperatorIDs() {
		if s, ok := Lookup(id); !ok || s.ID != id || s.run == nil {
			t.Errorf("Lookup(%d) = %+v, %v", id, s, ok)
		}
		for _, m := range All {
			if m.ID == id {
				t.Errorf("operator scenario %d clashes with matrix scenario %s", id, m.Name)
			}
		}
	}
}

func TestStopSpan(t *testing.T) {
	j := `-- Journal begins --
1795972000.100000 vm systemd[1]: Stopping kube-scheduler.service - kha-lab witness for kube-scheduler...
1795972000.672897 vm systemd[1]: Stopping kube-scheduler.service - kha-lab witness for kube-scheduler...
1795972000.681373 vm systemd[1]: kube-scheduler.service: Deactivated successfully.
1795972000.689791 vm systemd[1]: Stopped kube-scheduler.service - kha-lab witness for kube-scheduler.
1795972000.699475 vm systemd[1]: Stopping kube-controller-manager.service - kha-lab witness for kube-controller-manager...
1795972000.703450 vm systemd[1]: Stopped kube-controller-manager.service - kha-lab witness for kube-controller-manager.
1795972000.800000 vm kha-supervisor[201]: Stopped nothing
`
	first, last := stopSpan(j, time.Unix(1795972000, 500000000))
	if d := last.Sub(first); first.IsZero() || d != 30553*time.Microsecond {
		t.Errorf("stop span %s from %s, want 30.553ms", d, first)
	}
	if f, l := stopSpan(j, time.Unix(1795972001, 0)); !f.IsZero() || !l.IsZero() {
		t.Errorf("lines before since counted: %s %s", f, l)
	}
}
