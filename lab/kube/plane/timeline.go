package plane

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Owners of a timeline mark: whose behaviour it is.
const (
	OwnerKube = "Kubernetes"
	OwnerKha  = "kha-supervisor"
	OwnerLab  = "lab"
)

// Mark is one event of a trial's timeline (Key, At, Label, Owner, Source).
type Mark = report.Mark

// since is the mark's offset from the fault, in seconds.
func since(m Mark, fault time.Time) float64 { return m.At.Sub(fault).Seconds() }

// WriteTimeline writes the timeline of the trials of scenario id: one row
// per event, its median offset from the fault and the spread over the
// trials, whose behaviour it is and how it was measured; then each
// trial's facts. What is written is all from the saved results, so the
// text can be regenerated (`kha-lab timeline FILE.json`).
func WriteTimeline(w io.Writer, results []report.Result, id int) error {
	var rs []report.Result
	for _, r := range results {
		if r.ID == id && len(r.Timeline) > 0 {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return fmt.Errorf("no trial of scenario %d with a timeline", id)
	}
	for _, mode := range modesOf(rs) {
		var in []report.Result
		for _, r := range rs {
			if r.Mode == mode {
				in = append(in, r)
			}
		}
		fmt.Fprintf(w, "Mode %s, %d trials:\n\n", mode, len(in))
		fmt.Fprintf(w, "| t after the fault: median [spread] (trials) | event | whose behaviour | measured by |\n|---|---|---|---|\n")
		for _, row := range timelineRows(in) {
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.span(), row.Label, row.Owner, row.Source)
		}
		fmt.Fprintln(w)
	}
	for _, r := range rs {
		fmt.Fprintf(w, "Trial %s #%d (fault %s UTC, active %s -> %s, pass %v):\n\n", r.Mode, r.Repeat,
			r.FaultAt.UTC().Format("15:04:05.000"), r.Leader, r.NewLeader, r.Pass)
		roles := Roles(r.Leader)
		for _, f := range r.Facts {
			if !strings.HasPrefix(f, "roles in this trial:") {
				f = roles.Name(f)
			}
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
	Differs bool // the text differs between trials (other pod names)
}

func (r timelineRow) span() string {
	s := report.Summarize(r.Offsets)
	if s.N == 1 {
		return fmt.Sprintf("%.2f s", s.Median)
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f] (%d)", s.Median, s.Min, s.Max, s.N)
}

// timelineRows groups the marks by key, in the order of their median.
func timelineRows(rs []report.Result) []timelineRow {
	byKey := map[string]*timelineRow{}
	var keys []string
	for _, r := range rs {
		roles := Roles(r.Leader)
		for _, m := range r.Timeline {
			m.Label, m.Source = roles.Name(m.Label), roles.Name(m.Source)
			row, ok := byKey[m.Key]
			if !ok {
				row = &timelineRow{Mark: m}
				byKey[m.Key] = row
				keys = append(keys, m.Key)
			}
			row.Offsets = append(row.Offsets, since(m, r.FaultAt))
			row.Differs = row.Differs || m.Label != row.Label
		}
	}
	out := make([]timelineRow, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	sort.SliceStable(out, func(i, j int) bool { return upperMedian(out[i].Offsets) < upperMedian(out[j].Offsets) })
	for i := range out {
		if out[i].Differs {
			out[i].Label += " (names of the first trial)"
		}
		if n := len(out[i].Offsets); n < len(rs) {
			out[i].Label += fmt.Sprintf(" (in %d of %d trials)", n, len(rs))
		}
	}
	return out
}

// upperMedian is the rows' sort key: the upper of the two middle values,
// not Summarize's mean of them (kept: it orders the published timelines).
func upperMedian(xs []float64) float64 {
	o := slices.Clone(xs)
	slices.Sort(o)
	return o[len(o)/2]
}

func modesOf(rs []report.Result) []string {
	var out []string
	for _, r := range rs {
		if !slices.Contains(out, r.Mode) {
			out = append(out, r.Mode)
		}
	}
	return out
}

// HostRoles names the lab's hosts by their role in the operators' question:
// M1 the faulted active master, W1 the worker in its rack R1, M2, W2 and R2
// the other rack's. Trials of either side then read as one.
type HostRoles map[string]string

// Roles are the roles when master active is faulted.
func Roles(active string) HostRoles {
	r := HostRoles{}
	for _, w := range Workers {
		if w.Near == active {
			r[w.Near], r[w.Name], r[w.Rack] = "M1", "W1", "R1"
		} else {
			r[w.Near], r[w.Name], r[w.Rack] = "M2", "W2", "R2"
		}
	}
	return r
}

// hostWord is a host or rack name as a word: pod names never end in one
// after a dash (their suffixes are five characters).
var hostWord = regexp.MustCompile(`\b[mwr][12]\b`)

// Name replaces the host and rack names in s by their roles.
func (h HostRoles) Name(s string) string {
	return hostWord.ReplaceAllStringFunc(s, func(w string) string {
		if r, ok := h[w]; ok {
			return r
		}
		return w
	})
}
