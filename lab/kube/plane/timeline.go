package plane

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"time"
)

// Owners of a timeline mark: whose behaviour it is.
const (
	OwnerKube = "Kubernetes"
	OwnerKha  = "kha-supervisor"
	OwnerLab  = "lab"
)

// Mark is one event of a trial's timeline.
type Mark struct {
	Key    string    `json:"key"` // the same event in every trial (the summary's row)
	At     time.Time `json:"at"`
	What   string    `json:"what"`
	Owner  string    `json:"owner"`
	Source string    `json:"source"` // how it was measured
}

// Since is the mark's offset from the fault, in seconds.
func (m Mark) Since(fault time.Time) float64 { return m.At.Sub(fault).Seconds() }

// WriteTimeline writes the timeline of the trials of scenario id: one row
// per event, its median offset from the fault and the spread over the
// trials, whose behaviour it is and how it was measured; then each
// trial's facts. What is written is all from the saved results, so the
// text can be regenerated (`kha-lab timeline FILE.json`).
func WriteTimeline(w io.Writer, results []Result, id int) error {
	var rs []Result
	for _, r := range results {
		if r.ID == id && len(r.Timeline) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("no trial of scenario %d with a timeline", id)
	}
	for _, mode := range modesOf(rs) {
		var in []Result
		for _, r := range rs {
			if r.Mode == mode {
				in = append(in, r)
			}
		}
		fmt.Fprintf(w, "Mode %s, %d trials:\n\n", mode, len(in))
		fmt.Fprintf(w, "| t after the fault: median [spread] (trials) | event | whose behaviour | measured by |\n|---|---|---|---|\n")
		for _, row := range timelineRows(in) {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.span(), row.What, row.Owner, row.Source)
		}
		fmt.Fprintln(w)
	}
	for _, r := range rs {
		fmt.Fprintf(w, "Trial %s #%d (fault %s UTC, active %s -> %s, pass %v):\n\n", r.Mode, r.Repeat,
			r.FaultAt.UTC().Format("15:04:05.000"), r.Leader, r.NewLeader, r.Pass)
		for _, f := range r.Facts {
			fmt.Fprintf(w, "- %s\n", f)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(w, "- PROBLEM: %s\n", p)
		}
		fmt.Fprintln(w)
	}
	return nil
}

type timelineRow struct {
	Mark
	Offsets []float64
}

func (r timelineRow) span() string {
	o := slices.Clone(r.Offsets)
	slices.Sort(o)
	med := o[len(o)/2]
	if len(o)%2 == 0 {
		med = (o[len(o)/2-1] + o[len(o)/2]) / 2
	}
	if len(o) == 1 {
		return fmt.Sprintf("%.2f s", med)
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f] (%d)", med, o[0], o[len(o)-1], len(o))
}

// timelineRows groups the marks by key, in the order of their median.
func timelineRows(rs []Result) []timelineRow {
	byKey := map[string]*timelineRow{}
	var keys []string
	for _, r := range rs {
		for _, m := range r.Timeline {
			row, ok := byKey[m.Key]
			if !ok {
				row = &timelineRow{Mark: m}
				byKey[m.Key] = row
				keys = append(keys, m.Key)
			}
			row.Offsets = append(row.Offsets, m.Since(r.FaultAt))
		}
	}
	out := make([]timelineRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	sort.SliceStable(out, func(i, j int) bool { return median(out[i].Offsets) < median(out[j].Offsets) })
	for i := range out {
		if n := len(out[i].Offsets); n < len(rs) {
			out[i].What += fmt.Sprintf(" (in %d of %d trials)", n, len(rs))
		}
	}
	return out
}

func median(xs []float64) float64 {
	o := slices.Clone(xs)
	slices.Sort(o)
	return o[len(o)/2]
}

func modesOf(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.Mode) {
			out = append(out, r.Mode)
		}
	}
	return out
}
