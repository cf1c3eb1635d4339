package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func result(id int, pass bool, stopped, won float64) Result {
	r := Result{ID: id, Name: fmt.Sprintf("scenario-%d", id), Pass: pass,
		StandIn: StandIn{Fault: "a fault", Expected: "an outcome", Metrics: map[string]float64{MStopped: stopped, MWon: won, MMargin: won - stopped}}}
	if !pass {
		r.Problems = []string{"something broke"}
	}
	return r
}

func TestAggregateMedianAndSpread(t *testing.T) {
	reps := []*Report{
		{Kind: "matrix", Results: []Result{result(1, true, 1000, 4000), result(1, true, 1200, 4100), result(4, true, 50, 4500)}},
		{Kind: "matrix", Results: []Result{result(1, true, 1100, 4300), result(1, false, 900, 3900)}},
	}
	rows := Aggregate(reps)
	if len(rows) != 2 || rows[0].ID != 1 || rows[1].ID != 4 {
		t.Fatalf("rows = %+v", rows)
	}
	r1 := rows[0]
	if r1.Runs != 4 || r1.Passes != 3 {
		t.Fatalf("scenario 1: runs %d passes %d, want 4 and 3", r1.Runs, r1.Passes)
	}
	st := r1.Metrics[MStopped]
	if st.N != 4 || st.Median != 1050 || st.Min != 900 || st.Max != 1200 {
		t.Fatalf("stopped Stat = %+v, want n 4 median 1050 min 900 max 1200", st)
	}
	if got := st.String(); got != "1050 ms (900 ms–1200 ms)" {
		t.Fatalf("Stat text %q", got)
	}
	if rows[1].Metrics[MWon].String() != "4500 ms" {
		t.Fatalf("single value text %q", rows[1].Metrics[MWon].String())
	}
	var b bytes.Buffer
	WriteMarkdown(&b, reps)
	out := b.String()
	if !strings.Contains(out, "**FAIL** 3/4") || !strings.Contains(out, "PASS 1/1") || !strings.Contains(out, "FAILED: something broke") {
		t.Fatalf("markdown misses verdicts:\n%s", out)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	rep := &Report{Kind: "matrix", Started: time.Unix(1700000000, 0), Results: []Result{result(3, true, 1500, 4200)}, Pass: true}
	path, err := rep.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir {
		t.Fatalf("saved to %s", path)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Results) != 1 || got[0].Results[0].Metrics[MMargin] != 2700 {
		t.Fatalf("loaded %+v", got)
	}
}

// A report saved before the typed figures (no schema) is refused, naming
// the file, not read with its figures missing.
func TestLoadRefusesReportsBeforeTypedFigures(t *testing.T) {
	path := filepath.Join(t.TempDir(), "matrix-old.json")
	if err := os.WriteFile(path, []byte(`{"kind":"matrix","results":[{"id":9,"notes":["guard said: no"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "schema 0") {
		t.Fatalf("Load of a schema-0 report: err = %v, want a refusal naming the file and its schema", err)
	}
}

func TestTimelineSVGIsWellFormed(t *testing.T) {
	f := time.Unix(1700000000, 0)
	res := result(1, true, 1500, 4200)
	res.FaultAt = f
	res.Timeline = []Mark{{At: f, Label: "fault: cut <rack> & more"}, {At: f.Add(1500 * time.Millisecond), Label: "last heartbeat"}, {At: f.Add(4200 * time.Millisecond), Label: "m2 wins the election key"}}
	res.Alive = []Span{{Node: "m1", Unit: "kube-scheduler", From: f.Add(-10 * time.Second), To: f.Add(1540 * time.Millisecond)},
		{Node: "m2", Unit: "kube-scheduler", From: f.Add(4400 * time.Millisecond), To: f.Add(20 * time.Second)}}
	var b bytes.Buffer
	if err := WriteTimelineSVG(&b, res, 4*time.Second); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	rects := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// background + 4 lane backgrounds + 2 alive spans
	if rects != 7 {
		t.Fatalf("rects = %d, want 7", rects)
	}
}

// One grouping for every table: by scenario, then by mode in the order the
// modes first ran; a stand-in report (no modes) gives one group per
// scenario across reports.
func TestGroupResultsByScenarioThenModeAsTheyRan(t *testing.T) {
	rs := []Result{{ID: 41, Mode: "le-tuned"}, {ID: 40, Mode: "le-tuned"}, {ID: 40, Mode: "kha-fast"}, {ID: 40, Mode: "le-tuned", Repeat: 2}, {ID: 3}, {ID: 3, Repeat: 2}}
	var got []string
	for _, g := range GroupResults(rs) {
		got = append(got, fmt.Sprintf("%d %s x%d", g.ID, g.Mode, len(g.Trials)))
	}
	if want := []string{"3  x2", "40 le-tuned x2", "40 kha-fast x1", "41 le-tuned x1"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("groups %q, want %q", got, want)
	}
}
