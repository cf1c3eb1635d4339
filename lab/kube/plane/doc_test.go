package plane

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func TestSectionReplacesOnlyItsOwn(t *testing.T) {
	doc := []byte("# Failure modes\n\n## The operators' questions\n\nkeep me\n\n" +
		SectionHeading + " (old)\n\nold table\n\n## The failure matrix\n\nkeep me too\n")
	var rs []report.Result
	for i, v := range []float64{6000, 7000, 8000} {
		rs = append(rs, report.Result{ID: 40, Name: "real: leader's rack cut off", Mode: "kha-fast", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{SchedMS: v, UnboundMS: v, CMMS: v}})
		rs = append(rs, report.Result{ID: 40, Name: "real: leader's rack cut off", Mode: "le-tuned", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{SchedMS: v / 2, UnboundMS: v / 2, CMMS: v}})
	}
	var sec bytes.Buffer
	if err := WriteSection(&sec, rs, SectionOptions{SVG: "sidebyside.svg", Load: "load average 1"}); err != nil {
		t.Fatal(err)
	}
	out, err := ReplaceSection(doc, sec.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"## The operators' questions\n\nkeep me\n\n" + SectionHeading, "| 40 leader's rack cut off | kha-fast | 3 | 7.00 s [6.00-8.00]",
		"scenario 40, kha-fast / le-tuned: scheduler (longest pod unbound) 2.00", "![side-by-side", "(sidebyside.svg)", "its load during the runs: load average 1.", "\n## The failure matrix\n\nkeep me too\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("document lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "old table") || strings.Count(s, SectionHeading) != 1 {
		t.Errorf("the old section is still there:\n%s", s)
	}
	if _, err := ReplaceSection([]byte("# no such section\n"), sec.Bytes()); err == nil {
		t.Error("a document without the section was accepted")
	}
}

// The section of a run without kha-fast (the regenerated side-by-side:
// kha-fast-kill against le-tuned) quotes the kha modes it has where the
// prose gives a kha-supervisor figure, never "not measured" for a mode the
// run did not have.
func TestSectionProseQuotesTheModesTheRunHas(t *testing.T) {
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T072352.json"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteSection(&b, rs, SectionOptions{SVG: "sidebyside.svg", Load: "load average 1"}); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, bad := range []string{"not measured fast", "(scheduler not measured)", "(controller-manager not measured)", "0 of 0 (defaults)", "here not measured", "(scheduler )", "back )", "start ()", "the TTL `fast-kill` has now"} {
		if strings.Contains(s, bad) {
			t.Errorf("the section says %q", bad)
		}
	}
	for _, want := range []string{"costs a restart in\n  place (scheduler kha-fast-kill 0.83 s [0.62-0.90])", "start (kha-fast-kill 0.60 s [0.47-0.70]) is the price"} {
		if !strings.Contains(s, want) {
			t.Errorf("the section lacks %q", want)
		}
	}
}
