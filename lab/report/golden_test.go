package report

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.* from the code")

// A saved matrix run (the lab's 15 scenarios of 2 December, testdata,
// compact JSON) gives the same docs/failure-modes.md, timeline picture and
// report table byte for byte: the documents' text and figures cannot move
// unnoticed under a change of the model (-update only for a change of the
// text meant as such).
func TestDocsAreByteIdenticalFromASavedRun(t *testing.T) {
	reps, err := Load(filepath.Join("testdata", "matrix-20261202-144419.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fm, svg, table bytes.Buffer
	if err := WriteFailureModes(&fm, FailureModes{Matrix: reps, SVG: "failover-timeline.svg", IssueIDs: []int{23, 24, 25, 26}}); err != nil {
		t.Fatal(err)
	}
	first, ok := FirstResult(reps, 1)
	if !ok {
		t.Fatal("no passing result of scenario 1")
	}
	if err := WriteTimelineSVG(&svg, first, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	WriteMarkdown(&table, reps)
	for name, b := range map[string][]byte{"failure-modes.golden.md": fm.Bytes(), "timeline.golden.svg": svg.Bytes(), "report.golden.md": table.Bytes()} {
		golden := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(golden, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s: the output differs (%d bytes, want %d): diff it with -update and git diff", golden, len(b), len(want))
		}
	}
}
