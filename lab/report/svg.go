package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// The picture's geometry.
const (
	svgWidth, svgLeft, svgRight = 960, 190, 30
	svgTop, svgLane             = 150, 30
)

// timeline maps instants of one result onto the picture's x axis.
type timeline struct {
	res      Result
	from, to time.Time
	units    []string
	lanes    int
}

func (tl timeline) x(t time.Time) float64 {
	if t.Before(tl.from) {
		t = tl.from
	}
	if t.After(tl.to) {
		t = tl.to
	}
	return svgLeft + float64(t.Sub(tl.from))/float64(tl.to.Sub(tl.from))*float64(svgWidth-svgLeft-svgRight)
}

// WriteTimelineSVG draws one scenario run: a lane per node and unit with the
// spans the witness saw it alive, and a line for every mark (fault, last
// heartbeat, win, first heartbeat, heal), from a little before the fault to
// a little after the last mark of interest.
func WriteTimelineSVG(w io.Writer, res Result, ttl time.Duration) error {
	if res.FaultAt.IsZero() {
		return fmt.Errorf("scenario %d has no fault instant", res.ID)
	}
	tl := timeline{res: res, from: res.FaultAt.Add(-1500 * time.Millisecond), to: res.FaultAt.Add(ttl + 2*time.Second)}
	for _, m := range res.Timeline {
		if m.At.After(res.FaultAt) && !strings.HasPrefix(m.Label, "steady") && m.At.Add(1500*time.Millisecond).After(tl.to) {
			tl.to = m.At.Add(1500 * time.Millisecond)
		}
	}
	for _, wi := range lab.Witnesses {
		tl.units = append(tl.units, wi.Unit)
	}
	tl.lanes = len(lab.MasterNames) * len(tl.units)
	height := svgTop + tl.lanes*svgLane + 60
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">Scenario %d: %s</text>`+"\n", res.ID, html.EscapeString(res.Fault))
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#444">expected: %s. Lanes show when each node's unit was alive (witness heartbeats + 40 ms).</text>`+"\n", html.EscapeString(res.Expected))
	tl.axis(&b)
	tl.drawLanes(&b)
	tl.marks(&b)
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#444">margin (win - last heartbeat of the old units): %s; overlap: %.0f ms</text>`+"\n",
		height-12, metricText(res, MMargin), res.OverlapMS)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// axis draws the time axis: a tick per second after the fault.
func (tl timeline) axis(b *strings.Builder) {
	axisY := svgTop + tl.lanes*svgLane + 10
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", svgLeft, axisY, svgWidth-svgRight, axisY)
	for s := -1; ; s++ {
		t := tl.res.FaultAt.Add(time.Duration(s) * time.Second)
		if t.After(tl.to) {
			break
		}
		if t.Before(tl.from) {
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555">%+ds</text>`+"\n",
			tl.x(t), axisY, tl.x(t), axisY+5, tl.x(t), axisY+18, s)
	}
}

// drawLanes draws a lane per node and unit with its alive spans.
func (tl timeline) drawLanes(b *strings.Builder) {
	colors := map[string]string{"m1": "#2b6cb0", "m2": "#dd6b20"}
	row := 0
	for _, n := range lab.MasterNames {
		for _, u := range tl.units {
			y := svgTop + row*svgLane
			fmt.Fprintf(b, `<text x="10" y="%d">%s %s</text>`+"\n", y+18, n, u)
			fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", svgLeft, y+4, svgWidth-svgLeft-svgRight, svgLane-8)
			for _, sp := range tl.res.Alive {
				if sp.Node != n || sp.Unit != u || !sp.To.After(tl.from) || !sp.From.Before(tl.to) {
					continue
				}
				fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
					tl.x(sp.From), y+6, max(tl.x(sp.To)-tl.x(sp.From), 1), svgLane-12, colors[n])
			}
			row++
		}
	}
}

// marks draws the timeline's marks, labels staggered in the header band.
func (tl timeline) marks(b *strings.Builder) {
	level := 0
	for _, m := range tl.res.Timeline {
		if m.At.Before(tl.from) || m.At.After(tl.to) || strings.HasPrefix(m.Label, "steady") {
			continue
		}
		color := "#555"
		switch {
		case strings.HasPrefix(m.Label, "fault"):
			color = "#c53030"
		case strings.Contains(m.Label, "wins"):
			color = "#2f855a"
		case strings.HasPrefix(m.Label, "heal"):
			color = "#718096"
		}
		ly := 58 + (level%5)*17
		level++
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4,3"/>`+"\n", tl.x(m.At), ly+3, tl.x(m.At), svgTop+tl.lanes*svgLane, color)
		anchor := "start"
		if tl.x(m.At) > svgWidth-260 {
			anchor = "end"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="%s" text-anchor="%s">%s (%+.0f ms)</text>`+"\n",
			tl.x(m.At)+3, ly, color, anchor, html.EscapeString(m.Label), float64(m.At.Sub(tl.res.FaultAt).Microseconds())/1000)
	}
}

func metricText(res Result, k string) string {
	v, ok := res.Metrics[k]
	if !ok {
		return "n/a"
	}
	return fmtMS(v)
}
