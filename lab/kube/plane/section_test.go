package plane

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

var update = flag.Bool("update", false, "rewrite testdata/section.golden.md from the code")

// goldenResults are 40-50 in the four modes, three repeats, with figures
// drawn from a fixed seed: cells not measured, missing figures, handoffs with and without the
// other master's write, overlaps, findings and a failed setup included.
func goldenResults() []report.Result {
	rng := rand.New(rand.NewPCG(7, 11))
	t0 := time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)
	ms := func(top float64, miss float64) float64 {
		if rng.Float64() < miss {
			return 0
		}
		return float64(rng.IntN(int(top*1000))) / 1000
	}
	var out []report.Result
	for rep := 1; rep <= 3; rep++ {
		for _, mode := range []string{"kha-fast", "kha-default", "le-tuned", "le-defaults"} {
			for id := 40; id <= 50; id++ {
				if (id == 43 && mode == "le-defaults") || (id == 46 && mode == "kha-default") {
					continue // not measured
				}
				r := report.Result{ID: id, Name: "real: scenario " + string(rune('A'+id-40)), Mode: mode, Repeat: rep,
					Leader: "m1", NewLeader: "m2", FaultAt: t0.Add(time.Duration(rep*100+id) * time.Minute),
					RealPlane: report.RealPlane{CMLeader: "m1",
						SchedMS: ms(20000, 0.2), UnboundMS: ms(25000, 0), CMMS: ms(25000, 0.1), ColdMS: ms(3000, 0.3),
						DoubleBind: []int{0, 0, 1, 3}[rng.IntN(4)], ExtraRS: rng.IntN(2)},
					Pass: rng.Float64() > 0.2} // the draws in their order of before
				if id == 45 && rep == 3 {
					r.FaultAt = time.Time{} // its setup failed
				}
				if rng.Float64() > 0.3 {
					r.Overlaps = []string{"o"}
				}
				if rng.Float64() > 0.3 {
					h := report.ResourceHandoff{}
					if rng.Float64() > 0.3 {
						v := ms(1000, 0) - 500
						h.LastOldMS = &v
					}
					if rng.Float64() > 0.3 {
						v := ms(9000, 0)
						h.FirstOtherMS = &v
					}
					r.Handoff = map[string]report.ResourceHandoff{audit.Scheduler: h}
				}
				if !r.Pass {
					r.Problems = []string{"p"}
					if rng.Float64() > 0.5 {
						r.Finding = "both wrote"
					}
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// The section's text is a template (report/templates/sidebyside.md.tmpl):
// from the same results it writes the same bytes (rewrite the golden file
// with -update only for a change of the text meant as such).
func TestSectionIsByteIdenticalFromTheSameResults(t *testing.T) {
	lookup := func(id int) (Spec, bool) {
		return Spec{ID: id, Name: "real: registered " + string(rune('a'+id-40)), Fault: "fault of " + string(rune('a'+id-40))}, id%2 == 0
	}
	var b bytes.Buffer
	if err := WriteSection(&b, goldenResults(), SectionOptions{SVG: "sidebyside.svg", Load: "load average 3", Sources: []string{"a.json", "b.json"}, Lookup: lookup}); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "section.golden.md")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("the section differs from %s (%d bytes, want %d): diff it with -update and git diff", golden, b.Len(), len(want))
	}
}
