package report

import (
	"embed"
	"fmt"
	"io"
	"strings"
	"text/template"
)

//go:embed templates/*.tmpl
var templateFiles embed.FS

// templates are the documents' text; the Go code around them only gathers
// the figures.
var templates = template.Must(template.New("docs").Funcs(template.FuncMap{
	"table": func(reps []*Report) string {
		var b strings.Builder
		WriteMarkdown(&b, reps)
		return b.String()
	},
	"esc":     esc,
	"figures": rowFigures,
	"soak": func(st *SoakStats) string {
		var b strings.Builder
		st.WriteMarkdown(&b)
		return b.String()
	},
}).ParseFS(templateFiles, "templates/*.tmpl"))

// WriteDoc writes the document of template name (templates/NAME) from
// data: every generated document's text is a template here.
func WriteDoc(w io.Writer, name string, data any) error {
	return templates.ExecuteTemplate(w, name, data)
}

// FirstResult returns the first passing result of scenario id in reps.
func FirstResult(reps []*Report, id int) (Result, bool) {
	for _, rep := range reps {
		for _, r := range rep.Results {
			if r.ID == id && r.Pass {
				return r, true
			}
		}
	}
	return Result{}, false
}

// FailureModes is what docs/failure-modes.md is made of: measured runs,
// plain answers to what operators ask with the figures of these runs, the
// timeline picture and the whole table.
type FailureModes struct {
	Matrix []*Report // the runs the page is about (the fast profile)
	Soak   *Report   // nil: no soak section
	// Defaults are runs with the shipped default profile, a section of
	// their own.
	Defaults []*Report
	// Before, when given, are runs of the same scenarios on older code (the
	// failing-first evidence of a fix): a table of their own, so the page
	// has each figure before and after.
	Before []*Report
	SVG    string // the timeline picture's file name next to the page; "" for none
	// IssueIDs are the issue scenarios of the scenario table: their
	// section is written when one of them ran.
	IssueIDs []int

	rows, soakRows map[int]Row
}

// WriteFailureModes writes docs/failure-modes.md.
func WriteFailureModes(w io.Writer, fm FailureModes) error {
	fm.rows = rowsByID(fm.Matrix)
	if fm.Soak != nil {
		fm.soakRows = rowsByID([]*Report{fm.Soak})
	}
	return templates.ExecuteTemplate(w, "failure-modes.md.tmpl", &fm)
}

func rowsByID(reps []*Report) map[int]Row {
	rows := map[int]Row{}
	for _, r := range Aggregate(reps) {
		rows[r.ID] = r
	}
	return rows
}

// M renders metric k of scenario id: median (min–max).
func (fm *FailureModes) M(id int, k string) string { return metric(fm.rows, id, k) }

func metric(rows map[int]Row, id int, k string) string {
	r, ok := rows[id]
	if !ok {
		return "(not measured)"
	}
	st, ok := r.Metrics[k]
	if !ok {
		return "(not measured)"
	}
	return st.String()
}

// Verdict is the caveat for scenarios ids: "" when every run passed, in
// the matrix and in the soak.
func (fm *FailureModes) Verdict(ids ...int) string {
	var bad []string
	for _, id := range ids {
		if r, ok := fm.rows[id]; ok && r.Passes != r.Runs {
			bad = append(bad, fmt.Sprintf("scenario %d failed %d of %d runs", id, r.Runs-r.Passes, r.Runs))
		}
		if r, ok := fm.soakRows[id]; ok && r.Passes != r.Runs {
			bad = append(bad, fmt.Sprintf("in the soak, scenario %d missed its expectation in %d of %d runs", id, r.Runs-r.Passes, r.Runs))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return " **Caveat: " + strings.Join(bad, "; ") + " (see the table and the soak below).**"
}

// Runs, Overlaps and Excused count the matrix's results, overlaps and
// overlaps made by hand on purpose.
func (fm *FailureModes) Runs() int {
	return count(fm.Matrix, func(r *Report) int { return len(r.Results) })
}
func (fm *FailureModes) Overlaps() int {
	return count(fm.Matrix, func(r *Report) int { return len(r.Overlaps) })
}
func (fm *FailureModes) Excused() int {
	return count(fm.Matrix, func(r *Report) int { return len(r.Excused) })
}

func count(reps []*Report, f func(*Report) int) int {
	n := 0
	for _, r := range reps {
		n += f(r)
	}
	return n
}

// Prof is the profile of the latest matrix run.
func (fm *FailureModes) Prof() Timing { return lastProfile(fm.Matrix) }

func lastProfile(reps []*Report) Timing {
	if len(reps) == 0 {
		return Timing{}
	}
	return reps[len(reps)-1].Profile
}

// EtcdName is how the page names the etcd timing.
func (fm *FailureModes) EtcdName() string { return etcdOf(fm.Prof()) }

// SoakStats is the soak's summary, nil without a soak.
func (fm *FailureModes) SoakStats() *SoakStats {
	if fm.Soak == nil {
		return nil
	}
	return fm.Soak.Soak
}

// SoakFaults is how many faults the soak drew.
func (fm *FailureModes) SoakFaults() int { return len(fm.Soak.Results) }

// GuardMessage is what the guard said refusing scenario 9's manual start.
func (fm *FailureModes) GuardMessage() string {
	r, _ := FirstResult(fm.Matrix, 9)
	return r.Figures.GuardMessage
}

// IssuesRan reports whether any issue scenario is in the matrix.
func (fm *FailureModes) IssuesRan() bool {
	for _, id := range fm.IssueIDs {
		if _, ok := fm.rows[id]; ok {
			return true
		}
	}
	return false
}
