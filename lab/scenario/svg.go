package scenario

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// WriteTimelineSVG draws one scenario run: a lane per node and unit with the
// spans the witness saw it alive, and a line for every mark (fault, last
// heartbeat, win, first heartbeat, heal), from a little before the fault to
// a little after the last mark of interest.
func WriteTimelineSVG(w io.Writer, res Result, ttl time.Duration) error {
	if res.FaultAt.IsZero() {
		return fmt.Errorf("scenario %d has no fault instant", res.ID)
	}
	from := res.FaultAt.Add(-1500 * time.Millisecond)
	to := res.FaultAt.Add(ttl + 2*time.Second)
	for _, m := range res.Timeline {
		if m.At.After(res.FaultAt) && !strings.HasPrefix(m.Label, "steady") && m.At.Add(1500*time.Millisecond).After(to) {
			to = m.At.Add(1500 * time.Millisecond)
		}
	}
	const (
		width, left, right = 960, 190, 30
		top, lane          = 150, 30
	)
	units := Units()
	lanes := len(lab.MasterNames) * len(units)
	height := top + lanes*lane + 60
	span := to.Sub(from)
	x := func(t time.Time) float64 {
		if t.Before(from) {
			t = from
		}
		if t.After(to) {
			t = to
		}
		return left + float64(t.Sub(from))/float64(span)*float64(width-left-right)
	}
	colors := map[string]string{"m1": "#2b6cb0", "m2": "#dd6b20"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">Scenario %d: %s</text>`+"\n", res.ID, html.EscapeString(res.Fault))
	fmt.Fprintf(&b, `<text x="10" y="38" fill="#444">expected: %s. Lanes show when each node's unit was alive (witness heartbeats + 40 ms).</text>`+"\n", html.EscapeString(res.Expected))
	// Time axis: a tick per second after the fault.
	axisY := top + lanes*lane + 10
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>`+"\n", left, axisY, width-right, axisY)
	for s := -1; ; s++ {
		t := res.FaultAt.Add(time.Duration(s) * time.Second)
		if t.After(to) {
			break
		}
		if t.Before(from) {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555">%+ds</text>`+"\n",
			x(t), axisY, x(t), axisY+5, x(t), axisY+18, s)
	}
	// Lanes.
	row := 0
	for _, n := range lab.MasterNames {
		for _, u := range units {
			y := top + row*lane
			fmt.Fprintf(&b, `<text x="10" y="%d">%s %s</text>`+"\n", y+18, n, u)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", left, y+4, width-left-right, lane-8)
			for _, sp := range res.Alive {
				if sp.Node != n || sp.Unit != u || !sp.To.After(from) || !sp.From.Before(to) {
					continue
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n",
					x(sp.From), y+6, max(x(sp.To)-x(sp.From), 1), lane-12, colors[n])
			}
			row++
		}
	}
	// Marks, labels staggered in the header band.
	level := 0
	for _, m := range res.Timeline {
		if m.At.Before(from) || m.At.After(to) || strings.HasPrefix(m.Label, "steady") {
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
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4,3"/>`+"\n", x(m.At), ly+3, x(m.At), top+lanes*lane, color)
		anchor := "start"
		if x(m.At) > width-260 {
			anchor = "end"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="%s" text-anchor="%s">%s (%+.0f ms)</text>`+"\n",
			x(m.At)+3, ly, color, anchor, html.EscapeString(m.Label), float64(m.At.Sub(res.FaultAt).Microseconds())/1000)
	}
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#444">margin (win - last heartbeat of the old units): %s; overlap: %.0f ms</text>`+"\n",
		height-12, metricText(res, MMargin), res.OverlapMS)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func metricText(res Result, k string) string {
	v, ok := res.Metrics[k]
	if !ok {
		return "n/a"
	}
	return fmtMS(v)
}
