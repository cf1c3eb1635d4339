package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// operatorReport is an operator run with its figures typed, as Save
// writes them, and the notes the scenarios wrote beside them.
func operatorReport() *Report {
	drillHandoff := Drill{Args: "handoff --expect-within 10s", Exit: 7, Output: []string{"drill handoff: m1 -> m2", "FAIL: m2 won the lease before m1's units were recorded stopped"},
		Witness: "m1's units last beat +0.182s, m2's first +0.575s after the command (in order)"}
	drillTight := Drill{Args: "failover --expect-within 100ms", Exit: 7, WantExit: 7, Output: []string{"as it should"}}
	drillFailover := Drill{Args: "failover --expect-within 30s", Output: []string{"drill failover: m1 -> m2", "+0.000s  request", "+3.959s  m2: lease won"},
		Witness: "m1's units last beat +0.050s, m2's first +4.100s after the command (in order)"}
	failed := PromotionFailedNote + "m1 at 17:05:02.486: demoted: promotion failed: start ...; it sat out its cooldown (10s)"
	return &Report{Schema: Schema, Kind: "operator", Started: t0, Ended: at(60000), Profile: Timing{Name: "fast", TTL: "4s"}, Results: []Result{
		{ID: 16, Name: "handoff-latency", Pass: true, StandIn: StandIn{Metrics: map[string]float64{"handoff": 612, "handoff_min": 504, "handoff_max": 969, "supervisor": 260}},
			Figures: Figures{Handoffs: []Handoff{{Total: 969, Supervisor: 322, UnitStart: 647, UnitStop: 100}, {Total: 612, Supervisor: 560, UnitStart: 52, UnitStop: 120}, {Total: 504, Supervisor: 230, UnitStart: 274, UnitStop: -1}}},
			Notes:   []string{"handoffs: 969, 612, 504 ms"}},
		{ID: 17, Name: "freeze", Repeat: 2, Pass: true, StandIn: StandIn{Metrics: map[string]float64{MStopped: 4321}},
			Figures: Figures{PromotionFailures: []string{failed}}, Notes: []string{failed}},
		{ID: 19, Name: "drills", Repeat: 2, Pass: false, Problems: []string{"drill handoff: exit 7"}, StandIn: StandIn{Metrics: map[string]float64{}},
			Figures: Figures{Drills: []Drill{drillHandoff, drillTight}}, Notes: []string{drillHandoff.Note(), drillTight.Note()}},
		{ID: 19, Name: "drills", Pass: true, StandIn: StandIn{Metrics: map[string]float64{"drill_failover_won": 3959}},
			Figures: Figures{Drills: []Drill{drillFailover}}, Notes: []string{drillFailover.Note()}},
		{ID: 22, Name: "package-upgrade-remove", Pass: false, Problems: []string{"guard silent"}, StandIn: StandIn{Metrics: map[string]float64{}}},
		{ID: 1, Name: "leader-rack-isolated", Pass: true, StandIn: StandIn{Metrics: map[string]float64{"handoff": 1}}},
	}}
}

// saveLoad saves rep as the lab does and loads it back.
func saveLoad(t *testing.T, rep *Report) *Report {
	t.Helper()
	path, err := rep.Save(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reps, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return reps[0]
}

var operatorIDs = []int{16, 17, 18, 19, 20, 21, 22}

// The operator doc from a saved report: every figure it quotes.
func TestWriteOperatorDoc(t *testing.T) {
	rep := saveLoad(t, operatorReport())
	var b bytes.Buffer
	if err := WriteOperatorDoc(&b, OperatorDoc{Reports: []*Report{rep}, IDs: operatorIDs, HandoffRounds: 5}); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	for _, want := range []string{
		"3 of 5 runs passed",
		"| **612 ms (504 ms–969 ms)** |",
		"of which the rest: command start-up, request through etcd, release, win, barrier | 331 ms (222 ms–440 ms) |",
		"met in 2 of 3 handoffs; not counting the old\nunits' own stop time either, in 2 of 3",
		"scenario 17 (run 2): promotion failed on m1 at 17:05:02.486",
		"leave out the\n1 run(s) in which a promotion failed",
		"its units stopped (not measured) after", // the excluded run's figure stays out of the text
		"stopped 4321 ms",                        // and is in the table
		"win the lease 3959 ms after",
		"    $ kha-supervisor drill failover --expect-within 30s\n    drill failover: m1 -> m2\n",
		"(exit 0)\n    (witness heartbeats: m1's units last beat +0.050s, m2's first +4.100s after the command (in order))\n",
		"**FAIL** 0/1",
		"- run 2 of 17:00: drill handoff --expect-within 10s -> exit 7: drill handoff: m1 -> m2 / FAIL: m2 won the lease before m1's units were recorded stopped — witnesses: m1's units last beat +0.182s, m2's first +0.575s after the command (in order)\n\n",
		"FAILED: guard silent",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	if strings.Contains(doc, "leader-rack-isolated") {
		t.Error("a matrix scenario made it into the operator doc")
	}
}

// The doc reads the typed figures only: the same report with its notes
// gone gives the same doc.
func TestOperatorDocReadsFiguresNotNotes(t *testing.T) {
	render := func(rep *Report) string {
		var b bytes.Buffer
		if err := WriteOperatorDoc(&b, OperatorDoc{Reports: []*Report{rep}, IDs: operatorIDs, HandoffRounds: 5}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	withNotes := saveLoad(t, operatorReport())
	want := render(withNotes)
	typed := *withNotes
	typed.Results = nil
	for _, res := range withNotes.Results {
		res.Notes = nil
		typed.Results = append(typed.Results, res)
	}
	path, err := typed.Save(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reps, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if reps[0].Schema != Schema || len(reps[0].Results[0].Figures.Handoffs) != 3 {
		t.Fatalf("saved report: schema %d, scenario 16's figures %+v", reps[0].Schema, reps[0].Results[0].Figures)
	}
	if got := render(reps[0]); got != want {
		t.Errorf("the doc without the notes differs:\n--- with notes\n%s\n--- without\n%s", want, got)
	}
}

// Scenario 9's guard message in failure-modes.md comes from the figures.
func TestFailureModesQuotesTheGuard(t *testing.T) {
	res := result(9, true, 0, 0)
	res.Figures.GuardMessage = "kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 7)"
	var b bytes.Buffer
	if err := WriteFailureModes(&b, FailureModes{Matrix: []*Report{{Kind: "matrix", Results: []Result{res}}}, IssueIDs: []int{23}}); err != nil {
		t.Fatal(err)
	}
	doc := b.String()
	if !strings.Contains(doc, "naming the leader:\n\n    "+res.Figures.GuardMessage+"\n\n") {
		t.Errorf("the guard's message is not quoted:\n%s", doc)
	}
	if strings.Contains(doc, "Paths the first matrix could not see") {
		t.Error("the issue scenarios' section is written although none of them ran")
	}
}
