package plane

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// The picture of the side-by-side: per fault one bar per mode from the
// fault (0) to service resumed (ResumedMS, median), the spread (min-max)
// as a whisker.
const (
	svgWidth    = 1000
	svgLabelW   = 330 // the scenarios' names
	svgPlotW    = 520
	svgBarH     = 11
	svgBarGap   = 3
	svgGroupGap = 14
	svgTop      = 58
)

// modeColors: kha-supervisor blue, leader election orange; dark for the
// fast pair, light for the defaults.
var modeColors = map[string]string{
	"kha-fast": "#1f5fa8", "kha-default": "#8fb8e6", "le-tuned": "#d9661f", "le-defaults": "#f2b583",
}

func modeColor(m string) string {
	if c, ok := modeColors[m]; ok {
		return c
	}
	return "#888888"
}

// svgScale is the axis' end in seconds: the largest whisker, rounded up
// to 5 s.
func svgScale(gs []Group) float64 {
	top := 5.0
	for _, g := range gs {
		top = max(top, math.Ceil(g.Resumed.Max/1000/5)*5)
	}
	return top
}

// WriteSVG draws the side-by-side of results.
func WriteSVG(w io.Writer, results []report.Result) error {
	gs := Groups(results)
	modeNames, ids := modesAndIDs(gs)
	top := svgScale(gs)
	x := func(ms float64) float64 { return svgLabelW + ms/1000/top*svgPlotW }
	rowH := svgBarH + svgBarGap
	height := svgTop + len(ids)*(len(modeNames)*rowH+svgGroupGap) + 40
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	text(&b, 10, 18, "start", "bold", "Real control plane: fault -> service resumed (scheduler and controller-manager act again), median, whisker min-max")
	for i, m := range modeNames {
		lx := float64(svgLabelW + i*130)
		fmt.Fprintf(&b, `<rect x="%.1f" y="28" width="12" height="10" fill="%s"/>`+"\n", lx, modeColor(m))
		text(&b, lx+16, 37, "start", "", m)
	}
	bottom := float64(height - 30)
	for s := 0.0; s <= top; s += tick(top) {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", x(s*1000), svgTop-6, x(s*1000), bottom)
		text(&b, x(s*1000), bottom+14, "middle", "", fmt.Sprintf("%g s", s))
	}
	y := float64(svgTop)
	for _, id := range ids {
		labelled := false
		for _, g := range gs {
			if g.ID != id {
				continue
			}
			if !labelled {
				text(&b, svgLabelW-8, y+svgBarH, "end", "", fmt.Sprintf("%d %s", g.ID, g.Scenario))
				labelled = true
			}
			row := y + float64(slices.Index(modeNames, g.Mode)*rowH)
			bar(&b, g, row, x)
		}
		y += float64(len(modeNames)*rowH + svgGroupGap)
	}
	b.WriteString("</svg>\n")
	if err := checkXML(b.Bytes()); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// bar draws one group's bar, whisker and value; data-* attributes carry
// the figures (for tests and for readers of the source).
func bar(b *bytes.Buffer, g Group, y float64, x func(float64) float64) {
	r := g.Resumed
	mid := y + svgBarH/2
	fmt.Fprintf(b, `<rect class="bar" data-scenario="%d" data-mode="%s" data-median-s="%.2f" data-min-s="%.2f" data-max-s="%.2f" x="%.1f" y="%.1f" width="%.1f" height="%d" fill="%s"/>`+"\n",
		g.ID, esc(g.Mode), r.Median/1000, r.Min/1000, r.Max/1000, x(0), y, x(r.Median)-x(0), svgBarH, modeColor(g.Mode))
	if r.N > 1 {
		fmt.Fprintf(b, `<line class="whisker" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x(r.Min), mid, x(r.Max), mid)
		for _, v := range []float64{r.Min, r.Max} {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x(v), y+1, x(v), y+svgBarH-1)
		}
	}
	label := r.Seconds()
	if g.Overlaps+g.DoubleBinds+g.Extra > 0 {
		label += fmt.Sprintf(" — OVERLAP at the resource (%d)", g.Overlaps+g.DoubleBinds)
	}
	fill := "black"
	if g.Overlaps+g.DoubleBinds+g.Extra > 0 {
		fill = "#c00000"
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x(max(r.Max, r.Median))+4, y+svgBarH-1, fill, esc(label))
}

func tick(top float64) float64 {
	switch {
	case top <= 10:
		return 1
	case top <= 30:
		return 5
	default:
		return 10
	}
}

func text(b *bytes.Buffer, x, y float64, anchor, weight, s string) {
	w := ""
	if weight != "" {
		w = ` font-weight="` + weight + `"`
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s"%s>%s</text>`+"\n", x, y, anchor, w, esc(s))
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// checkXML refuses to write a picture that is not well-formed.
func checkXML(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("plane: side-by-side SVG: %w", err)
		}
	}
}
