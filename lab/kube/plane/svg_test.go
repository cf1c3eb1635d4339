package plane

import (
	"bytes"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// svgBar is a bar as the picture carries it.
type svgBar struct {
	Scenario string `xml:"data-scenario,attr"`
	Mode     string `xml:"data-mode,attr"`
	Median   string `xml:"data-median-s,attr"`
	Min      string `xml:"data-min-s,attr"`
	Max      string `xml:"data-max-s,attr"`
	X        string `xml:"x,attr"`
	Width    string `xml:"width,attr"`
	Class    string `xml:"class,attr"`
}

func TestSVGDrawsOneBarPerModeWithTheSpread(t *testing.T) {
	var rs []report.Result
	for i, v := range []float64{4000, 5000, 9000} {
		// Service resumed is the later of the two components.
		rs = append(rs, report.Result{ID: 40, Name: "real: cut <&>", Mode: "kha-fast", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{UnboundMS: v, SchedMS: 1, CMMS: v - 1000}})
		rs = append(rs, report.Result{ID: 40, Name: "real: cut <&>", Mode: "le-tuned", Repeat: i + 1, FaultAt: t0, Pass: true, RealPlane: report.RealPlane{UnboundMS: 1000, CMMS: 2 * v}})
	}
	rs = append(rs, report.Result{ID: 43, Name: "real: kill", Mode: "le-tuned", Repeat: 1, FaultAt: t0, Overlaps: []string{"x"}, RealPlane: report.RealPlane{UnboundMS: 6000}})
	var b bytes.Buffer
	if err := WriteSVG(&b, rs); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rects []svgBar `xml:"rect"`
		Lines []struct {
			Class string `xml:"class,attr"`
			X1    string `xml:"x1,attr"`
			X2    string `xml:"x2,attr"`
		} `xml:"line"`
	}
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not well-formed: %v\n%s", err, b.String())
	}
	var bars []svgBar
	for _, r := range doc.Rects {
		if r.Class == "bar" {
			bars = append(bars, r)
		}
	}
	want := []svgBar{
		{Scenario: "40", Mode: "kha-fast", Median: "5.00", Min: "4.00", Max: "9.00"},
		{Scenario: "40", Mode: "le-tuned", Median: "10.00", Min: "8.00", Max: "18.00"},
		{Scenario: "43", Mode: "le-tuned", Median: "6.00", Min: "6.00", Max: "6.00"},
	}
	if len(bars) != len(want) {
		t.Fatalf("%d bars, want %d: %+v", len(bars), len(want), bars)
	}
	for i, w := range want {
		g := bars[i]
		if g.Scenario != w.Scenario || g.Mode != w.Mode || g.Median != w.Median || g.Min != w.Min || g.Max != w.Max {
			t.Errorf("bar %d: %+v, want %+v", i, g, w)
		}
	}
	// The axis ends at 20 s (the largest whisker, 18 s, rounded up to 5 s):
	// the plot is svgPlotW wide from svgLabelW, so 10 s is half of it.
	if bars[1].X != "330.0" || bars[1].Width != "260.0" {
		t.Errorf("le-tuned bar x %s width %s, want 330.0 and 260.0 (10 s of 20 s over 520 px)", bars[1].X, bars[1].Width)
	}
	whiskers := 0
	for _, l := range doc.Lines {
		if l.Class == "whisker" {
			whiskers++
			if whiskers == 1 && (l.X1 != "434.0" || l.X2 != "564.0") {
				t.Errorf("kha-fast whisker %s..%s, want 434.0..564.0 (4 s .. 9 s)", l.X1, l.X2)
			}
		}
	}
	if whiskers != 2 {
		t.Errorf("%d whiskers, want 2 (one trial has no spread)", whiskers)
	}
	if !strings.Contains(b.String(), "OVERLAP at the resource (1)") || !strings.Contains(b.String(), "cut &lt;&amp;&gt;") {
		t.Errorf("the overlap is not marked or a name is not escaped:\n%s", b.String())
	}
}
