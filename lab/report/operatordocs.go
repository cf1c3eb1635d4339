package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// OperatorDoc is what docs/operator-scenarios.md is made of: saved runs of
// the operator scenarios, what each checks, the verdicts and the figures.
type OperatorDoc struct {
	Reports []*Report
	// IDs are the operator scenarios of the scenario table (the doc's
	// table leaves other scenarios out).
	IDs []int
	// HandoffRounds is how many handoffs scenario 16 makes per run.
	HandoffRounds int

	// clean are Reports without the results in which a promotion failed:
	// such a run is dominated by the cooldown, which says nothing about the
	// operator command. The prose quotes clean runs; such runs are listed
	// under Outliers and counted in the table.
	clean     []*Report
	Excluded  int
	cleanRows map[int]Row
	Rows      []Row
}

// WriteOperatorDoc writes docs/operator-scenarios.md.
func WriteOperatorDoc(w io.Writer, d OperatorDoc) error {
	for _, rep := range d.Reports {
		c := *rep
		c.Results = nil
		for _, res := range rep.Results {
			if len(res.Figures.PromotionFailures) > 0 {
				d.Excluded++
				continue
			}
			c.Results = append(c.Results, res)
		}
		d.clean = append(d.clean, &c)
	}
	d.cleanRows = rowsByID(d.clean)
	for _, r := range Aggregate(d.Reports) {
		if slices.Contains(d.IDs, r.ID) {
			d.Rows = append(d.Rows, r)
		}
	}
	return templates.ExecuteTemplate(w, "operator-scenarios.md.tmpl", &d)
}

// M renders metric k of scenario id over the clean runs.
func (d *OperatorDoc) M(id int, k string) string { return metric(d.cleanRows, id, k) }

// Runs, Passes and OverlapMS sum the table's rows.
func (d *OperatorDoc) Runs() int   { return sumRows(d.Rows, func(r Row) int { return r.Runs }) }
func (d *OperatorDoc) Passes() int { return sumRows(d.Rows, func(r Row) int { return r.Passes }) }
func (d *OperatorDoc) OverlapMS() float64 {
	v := 0.0
	for _, r := range d.Rows {
		v += r.OverlapMS
	}
	return v
}

func sumRows(rows []Row, f func(Row) int) int {
	n := 0
	for _, r := range rows {
		n += f(r)
	}
	return n
}

// Overlaps counts the runs' overlap intervals.
func (d *OperatorDoc) Overlaps() int {
	return count(d.Reports, func(r *Report) int { return len(r.Overlaps) })
}

// Prof is the profile of the latest run.
func (d *OperatorDoc) Prof() Timing { return lastProfile(d.Reports) }

// clean results of scenario id, in order.
func (d *OperatorDoc) results(id int) []Result {
	var out []Result
	for _, rep := range d.clean {
		for _, res := range rep.Results {
			if res.ID == id {
				out = append(out, res)
			}
		}
	}
	return out
}

// HandoffPool is every handoff of scenario 16 pooled.
type HandoffPool struct {
	N, Met, MetOwn                              int
	Total, Supervisor, UnitStop, UnitStart, Own Stat
}

// Handoffs pools scenario 16's handoffs over the clean runs.
func (d *OperatorDoc) Handoffs() HandoffPool {
	var hs []Handoff
	for _, res := range d.results(16) {
		hs = append(hs, res.Figures.Handoffs...)
	}
	pool := func(f func(Handoff) float64) Stat {
		var vs []float64
		for _, h := range hs {
			if v := f(h); v >= 0 {
				vs = append(vs, v)
			}
		}
		return Summarize(vs)
	}
	p := HandoffPool{N: len(hs),
		Total:      pool(func(h Handoff) float64 { return h.Total }),
		Supervisor: pool(func(h Handoff) float64 { return h.Supervisor }),
		UnitStop:   pool(func(h Handoff) float64 { return h.UnitStop }),
		UnitStart:  pool(func(h Handoff) float64 { return h.UnitStart }),
		Own: pool(func(h Handoff) float64 {
			if h.Supervisor < 0 || h.UnitStop < 0 {
				return -1
			}
			return h.Supervisor - h.UnitStop
		}),
	}
	for _, h := range hs {
		if h.Supervisor >= 0 && h.Supervisor < 500 {
			p.Met++
		}
		if h.Supervisor >= 0 && h.UnitStop >= 0 && h.Supervisor-h.UnitStop < 500 {
			p.MetOwn++
		}
	}
	return p
}

// LatestDrills are the drills of the latest clean run of scenario 19.
func (d *OperatorDoc) LatestDrills() []Drill {
	rs := d.results(19)
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1].Figures.Drills
}

// DrillFailures are the drills of every run that did not exit as
// expected, with what the witnesses saw.
func (d *OperatorDoc) DrillFailures() []string {
	var out []string
	for _, rep := range d.Reports {
		for _, res := range rep.Results {
			if res.ID != 19 {
				continue
			}
			for _, dr := range res.Figures.Drills {
				if dr.Exit == dr.WantExit {
					continue
				}
				line := fmt.Sprintf("run %d of %s: %s", res.Repeat, rep.Started.UTC().Format("15:04"), dr.Note())
				if dr.Witness != "" {
					line += " — witnesses: " + dr.Witness
				}
				out = append(out, line)
			}
		}
	}
	return out
}

// BanRefusals, Upgrades and GuardAnswers are scenarios 18's and 22's
// sentences over the clean runs.
func (d *OperatorDoc) BanRefusals() []string {
	return d.sentences(18, func(f Figures) []string { return f.BanRefusals })
}
func (d *OperatorDoc) Upgrades() []string {
	return d.sentences(22, func(f Figures) []string { return f.Upgrades })
}
func (d *OperatorDoc) GuardAnswers() []string {
	return d.sentences(22, func(f Figures) []string { return f.GuardAnswers })
}

func (d *OperatorDoc) sentences(id int, f func(Figures) []string) []string {
	var out []string
	for _, res := range d.results(id) {
		out = append(out, f(res.Figures)...)
	}
	return out
}

// Outliers are the failed promotions of every run.
func (d *OperatorDoc) Outliers() []string {
	var out []string
	for _, rep := range d.Reports {
		for _, res := range rep.Results {
			for _, n := range res.Figures.PromotionFailures {
				out = append(out, fmt.Sprintf("scenario %d (run %d): %s", res.ID, res.Repeat, n))
			}
		}
	}
	return out
}

// rowFigures is the table's figures cell: every metric, then the failures.
func rowFigures(r Row) string {
	var figs []string
	for _, k := range slices.Sorted(maps.Keys(r.Metrics)) {
		figs = append(figs, k+" "+r.Metrics[k].String())
	}
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "FAILED: ") {
			figs = append(figs, n)
		}
	}
	return strings.Join(figs, "; ")
}
