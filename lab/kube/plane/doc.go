package plane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// SectionHeading opens the side-by-side's section of docs/failure-modes.md.
const SectionHeading = "## The real control plane"

// ReplaceSection puts section in place of doc's side-by-side section (from
// its heading to the next "## " heading or the end).
func ReplaceSection(doc, section []byte) ([]byte, error) {
	start := -1
	for i := 0; i < len(doc); {
		line := doc[i:]
		if j := bytes.IndexByte(line, '\n'); j >= 0 {
			line = line[:j]
		}
		if bytes.HasPrefix(line, []byte(SectionHeading)) {
			start = i
			break
		}
		i += len(line) + 1
	}
	if start < 0 {
		return nil, fmt.Errorf("plane: no line starting with %q in the document", SectionHeading)
	}
	end := len(doc)
	if j := bytes.Index(doc[start+1:], []byte("\n## ")); j >= 0 {
		end = start + 1 + j + 1
	}
	out := slices.Concat(doc[:start], bytes.TrimRight(section, "\n"), []byte("\n\n"), doc[end:])
	return out, nil
}

// Section is what the side-by-side section of docs/failure-modes.md is
// made of (its text: lab/report/templates/sidebyside.md.tmpl): the figures
// of saved results, by scenario and mode.
type Section struct {
	Heading                 string
	Fast, FastKill, Default lab.Profile
	Faults                  []SectionFault
	// Modes are the results' modes in the order they first ran.
	Modes []string
	// Trials is how many results, First and Last the first and the last
	// fault among them.
	Trials      int
	First, Last string
	Load        string // the machine's load, or "not recorded"
	Sources     string // the saved runs, quoted, "" for none
	Table       string // WriteTable
	Comparison  string // WriteComparison
	SVG         string // the picture's path, "" for none

	gs []Group
}

// SectionFault is one scenario of the section's list of faults.
type SectionFault struct {
	ID          int
	Name, Fault string
}

// figures are the group figures the section's template names.
var figures = map[string]func(Group) report.Stat{
	"sched":   func(g Group) report.Stat { return g.Sched },
	"unbound": func(g Group) report.Stat { return g.Unbound },
	"cm":      func(g Group) report.Stat { return g.CM },
	"cold":    func(g Group) report.Stat { return g.Cold },
	"margin":  func(g Group) report.Stat { return g.Margin },
	"holder":  func(g Group) report.Stat { return g.Holder },
}

func (s *Section) g(id int, mode string) (Group, bool) { return findGroup(s.gs, id, mode) }

// Fig is figure of scenario id in mode as "6.77 s [6.71-7.24]", or "not
// measured".
func (s *Section) Fig(id int, mode, figure string) (string, error) {
	pick, ok := figures[figure]
	if !ok {
		return "", fmt.Errorf("plane: no figure %q (want one of sched, unbound, cm, cold, margin, holder)", figure)
	}
	g, ok := s.g(id, mode)
	if !ok || pick(g).N == 0 {
		return "not measured", nil
	}
	return pick(g).Seconds(), nil
}

// Each is a figure in each of the section's modes that ran scenario id.
func (s *Section) Each(id int, figure string) (string, error) {
	var parts []string
	for _, m := range s.Modes {
		if !s.Measured(id, m) {
			continue
		}
		f, err := s.Fig(id, m, figure)
		if err != nil {
			return "", err
		}
		parts = append(parts, m+" "+f)
	}
	return strings.Join(parts, ", "), nil
}

// KhaModes are the section's kha-supervisor modes, in the order they ran.
func (s *Section) KhaModes() []string {
	var out []string
	for _, m := range s.Modes {
		if strings.HasPrefix(m, "kha-") {
			out = append(out, m)
		}
	}
	return out
}

// SectionRun is one `kha-lab sidebyside` command line of the section's
// measurements: the scenarios that ran in the same modes.
type SectionRun struct {
	Modes, IDs string
	Repeat     int // the most trials of a cell
}

// Runs are the section's command lines: its scenarios grouped by the modes
// they ran in (each list in the order the modes first ran), in the order
// of the scenarios.
func (s *Section) Runs() []SectionRun {
	var out []SectionRun
	for _, f := range s.Faults {
		var modes []string
		repeat := 0
		for _, m := range s.Modes {
			if g, ok := s.g(f.ID, m); ok {
				modes = append(modes, m)
				repeat = max(repeat, len(g.Trials))
			}
		}
		list := strings.Join(modes, ",")
		i := slices.IndexFunc(out, func(r SectionRun) bool { return r.Modes == list })
		if i < 0 {
			out = append(out, SectionRun{Modes: list})
			i = len(out) - 1
		}
		out[i].IDs = strings.TrimSpace(out[i].IDs + " " + fmt.Sprint(f.ID))
		out[i].Repeat = max(out[i].Repeat, repeat)
	}
	return out
}

// Measured says whether scenario id ran in mode.
func (s *Section) Measured(id int, mode string) bool {
	_, ok := s.g(id, mode)
	return ok
}

// KhaEach is a figure in each of the section's kha-supervisor modes that
// ran scenario id, or "not measured" when none did.
func (s *Section) KhaEach(id int, figure string) (string, error) {
	var parts []string
	for _, m := range s.KhaModes() {
		if !s.Measured(id, m) {
			continue
		}
		f, err := s.Fig(id, m, figure)
		if err != nil {
			return "", err
		}
		parts = append(parts, m+" "+f)
	}
	if len(parts) == 0 {
		return "not measured", nil
	}
	return strings.Join(parts, ", "), nil
}

// KhaHarmed is Harmed over every kha-supervisor mode of the section.
func (s *Section) KhaHarmed(id int) Harmed { return s.Harmed(id, s.KhaModes()...) }

// Stayed counts a group's trials: Same, whose leader after the heal is the
// faulted one (no write from the other master after the fault), Other,
// those with one, of N.
type Stayed struct{ Same, Other, N int }

// Stayed counts the trials of scenario id in mode.
func (s *Section) Stayed(id int, mode string) Stayed {
	var st Stayed
	g, ok := s.g(id, mode)
	if !ok {
		return st
	}
	for _, r := range g.Trials {
		if h := r.Handoff[audit.Scheduler]; h.FirstOtherMS == nil {
			st.Same++
		} else {
			st.Other++
		}
	}
	st.N = len(g.Trials)
	return st
}

// Harmed counts trials in which both masters wrote at once (an overlap, a
// double binding or extra ReplicaSet pods), of N, and their double
// bindings.
type Harmed struct{ Harm, N, Binds int }

// Harmed counts the trials of scenario id in modes.
func (s *Section) Harmed(id int, modes ...string) Harmed {
	var h Harmed
	for _, m := range modes {
		g, ok := s.g(id, m)
		if !ok {
			continue
		}
		for _, r := range g.Trials {
			h.N++
			h.Binds += r.DoubleBind
			if len(r.Overlaps) > 0 || r.DoubleBind > 0 || r.ExtraRS > 0 {
				h.Harm++
			}
		}
	}
	return h
}

// Budget splits a kha mode's rack-cut figure (40) into what the timing
// explains (TTL after the last renewal, half a renew interval earlier on
// average, then the cold start) and the rest (campaign, promotion, unit
// starts, the prober's cadence, and the load).
func (s *Section) Budget(mode string) (string, error) {
	p, ok := map[string]lab.Profile{"kha-fast": s.Fast, "kha-fast-kill": s.FastKill, "kha-default": s.Default}[mode]
	if !ok {
		return "", fmt.Errorf("plane: no budget for mode %q (want kha-fast, kha-fast-kill or kha-default)", mode)
	}
	g, ok := s.g(40, mode)
	if !ok || g.Sched.N == 0 {
		return mode + ": not measured", nil
	}
	lease := p.TTL - p.Renew/2
	rest := g.Sched.Median - float64(lease.Milliseconds()) - g.Cold.Median
	return fmt.Sprintf("%s: %.2f s = TTL %s - half a renew interval (%s) + cold start %.2f s + %.2f s rest",
		mode, g.Sched.Median/1000, p.TTL, p.Renew/2, g.Cold.Median/1000, rest/1000), nil
}

// SectionOptions: svg is the picture's path relative to the document
// ("": no picture); Load is the machine's load seen during the run, in
// words, for the caveat (the results do not record it).
type SectionOptions struct {
	SVG, Load string
	Sources   []string // the saved runs, named in the section
	// Lookup names the faults (scenario.RealSpec); nil or not found: the
	// results' scenario name alone.
	Lookup Lookup
}

// WriteSection writes the side-by-side section of docs/failure-modes.md
// from saved results.
func WriteSection(w io.Writer, results []report.Result, o SectionOptions) error {
	if len(results) == 0 {
		return errors.New("plane: no results")
	}
	s := &Section{Heading: SectionHeading, Fast: lab.Fast, FastKill: lab.FastKill, Default: lab.Default, Trials: len(results),
		Load: "not recorded", SVG: o.SVG, gs: Groups(results)}
	s.Modes, _ = modesAndIDs(s.gs)
	if o.Load != "" {
		s.Load = o.Load
	}
	if len(o.Sources) > 0 {
		s.Sources = "`" + strings.Join(o.Sources, "`, `") + "`"
	}
	_, ids := modesAndIDs(s.gs)
	for _, id := range ids {
		f := SectionFault{ID: id}
		if sc, ok := o.lookup(id); ok {
			f.Name, f.Fault = strings.TrimPrefix(sc.Name, "real: "), sc.Fault
		} else {
			f.Name = s.firstOf(id).Scenario
		}
		s.Faults = append(s.Faults, f)
	}
	var first, last time.Time
	for _, r := range results {
		if r.FaultAt.IsZero() { // its setup failed
			continue
		}
		if first.IsZero() {
			first, last = r.FaultAt, r.FaultAt
		}
		first, last = minTime(first, r.FaultAt), maxTime(last, r.FaultAt)
	}
	s.First, s.Last = first.UTC().Format("2006-01-02 15:04"), last.UTC().Format("15:04")
	if y, m, d := first.UTC().Date(); !sameDay(last.UTC(), y, m, d) {
		s.Last = last.UTC().Format("2006-01-02 15:04")
	}
	var t strings.Builder
	WriteTable(&t, results)
	s.Table = t.String()
	var c strings.Builder
	WriteComparison(&c, s.gs)
	s.Comparison = c.String()
	return report.WriteDoc(w, "sidebyside.md.tmpl", s)
}

func (o SectionOptions) lookup(id int) (Spec, bool) {
	if o.Lookup == nil {
		return Spec{}, false
	}
	return o.Lookup(id)
}

func (s *Section) firstOf(id int) Group { return firstGroup(s.gs, id) }

// sameDay: t falls on the day y-m-d.
func sameDay(t time.Time, y int, m time.Month, d int) bool {
	ty, tm, td := t.Date()
	return ty == y && tm == m && td == d
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
