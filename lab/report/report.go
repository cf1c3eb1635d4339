package report

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Report is one `kha-lab run` (or soak): every result plus the overlap check
// over the whole span.
type Report struct {
	// Schema is the layout of the file: 0 for reports from before the
	// typed figures (Load refuses them), Schema otherwise.
	Schema   int        `json:"schema,omitempty"`
	Kind     string     `json:"kind"` // "matrix" or "soak"
	Started  time.Time  `json:"started"`
	Ended    time.Time  `json:"ended"`
	Profile  Timing     `json:"profile"`
	Results  []Result   `json:"results"`
	Overlaps []string   `json:"overlaps"` // whole span, not excused
	Excused  []string   `json:"excused_overlaps,omitempty"`
	Pass     bool       `json:"pass"`
	Soak     *SoakStats `json:"soak,omitempty"`
}

// Schema is the layout Save writes: results carry typed Figures.
const Schema = 2

// Timing is the profile as the report prints it.
type Timing struct {
	Name, TTL, Renew, RequestTimeout, StopTimeout, KillGrace, Slack, Poll, Cooldown string
	// Etcd is the members' raft timing (empty in reports from before it
	// was recorded: those ran the tuned 50/500 ms).
	Etcd string `json:",omitempty"`
}

// TimingOf renders p and the etcd timing et.
func TimingOf(p lab.Profile, et lab.EtcdTiming) Timing {
	return Timing{p.Name, p.TTL.String(), p.Renew.String(), p.RequestTimeout.String(), p.StopTimeout.String(),
		p.KillGrace.String(), p.Slack.String(), p.Poll.String(), p.Cooldown.String(), et.String()}
}

// etcdOf is how a report names its etcd timing.
func etcdOf(t Timing) string {
	if t.Etcd == "" {
		return "tuned (heartbeat 50 ms, election timeout 500 ms)"
	}
	return t.Etcd
}

// Save writes the report as JSON and Markdown into dir and returns the JSON
// path.
func (rep *Report) Save(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	rep.Schema = Schema
	base := filepath.Join(dir, fmt.Sprintf("%s-%s", rep.Kind, rep.Started.UTC().Format("20060102-150405")))
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(base+".json", b, 0o644); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	f, err := os.Create(base + ".md")
	if err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	WriteMarkdown(f, []*Report{rep})
	return base + ".json", nil
}

// Load reads reports written by Save. A report from before the typed
// figures (2 December 2026, schema 0) kept what the documents quote only
// as sentences in its notes; it is refused, naming the file: run the
// scenarios again.
func Load(paths ...string) ([]*Report, error) {
	var out []*Report
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("report: %w", err)
		}
		var r Report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("report: %s: %w", p, err)
		}
		if r.Schema < Schema {
			return nil, fmt.Errorf("report: %s: schema %d, saved before the typed figures; this kha-lab reads schema %d: run its scenarios again", p, r.Schema, Schema)
		}
		out = append(out, &r)
	}
	return out, nil
}

// Group is one scenario's results, in one mode when the results carry
// modes (the real plane's), in the order they ran: what every table of the
// lab aggregates (Row here, plane.Group for the real plane).
type Group struct {
	ID                    int
	Name, Fault, Expected string
	Mode                  string
	Trials                []Result
}

// GroupResults folds results into groups by scenario and mode: by ID, and
// within one ID in the order the modes first appear.
func GroupResults(results []Result) []Group {
	type key struct {
		id   int
		mode string
	}
	var keys []key
	by := map[key][]Result{}
	for _, r := range results {
		k := key{r.ID, r.Mode}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], r)
	}
	slices.SortStableFunc(keys, func(a, b key) int { return a.id - b.id })
	out := make([]Group, 0, len(keys))
	for _, k := range keys {
		first := by[k][0]
		out = append(out, Group{ID: k.id, Name: first.Name, Fault: first.Fault, Expected: first.Expected, Mode: k.mode, Trials: by[k]})
	}
	return out
}

// Row is one stand-in scenario aggregated over repeats (and over reports).
type Row struct {
	Group
	Runs, Passes int
	Metrics      map[string]Stat
	OverlapMS    float64
	Excused      int
	Notes        []string
}

// Aggregate groups the reports' results by scenario: stand-in results
// carry no mode, so one row per scenario (the docs index rows by ID).
func Aggregate(reps []*Report) []Row {
	var all []Result
	for _, rep := range reps {
		all = append(all, rep.Results...)
	}
	var rows []Row
	for _, g := range GroupResults(all) {
		rows = append(rows, row(g))
	}
	return rows
}

func row(g Group) Row {
	r := Row{Group: g, Runs: len(g.Trials), Metrics: map[string]Stat{}}
	vals := map[string][]float64{}
	for _, res := range g.Trials {
		if res.Pass {
			r.Passes++
		}
		r.OverlapMS += res.OverlapMS
		r.Excused += len(res.Excused)
		for k, v := range res.Metrics {
			vals[k] = append(vals[k], v)
		}
		for _, n := range res.Notes {
			if len(r.Notes) < 2 && !slices.Contains(r.Notes, n) {
				r.Notes = append(r.Notes, n)
			}
		}
		for _, p := range res.Problems {
			r.Notes = append(r.Notes, "FAILED: "+p)
		}
	}
	for k, vs := range vals {
		r.Metrics[k] = Summarize(vs)
	}
	return r
}

var standard = []string{MStopped, MWon, MFailover, MMargin, MGap}

// WriteMarkdown prints the aggregated table of reps.
func WriteMarkdown(w io.Writer, reps []*Report) {
	if len(reps) == 0 {
		fmt.Fprintln(w, "no reports")
		return
	}
	rows := Aggregate(reps)
	writeMatrixHead(w, reps, rows)
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(matrixCells(row), " | "))
	}
	for _, r := range reps {
		for _, o := range r.Overlaps {
			fmt.Fprintf(w, "\nOVERLAP (%s run of %s): %s\n", r.Kind, r.Started.UTC().Format("15:04:05"), o)
		}
		for _, o := range r.Excused {
			fmt.Fprintf(w, "\nBy hand, guard removed (%s run of %s): %s\n", r.Kind, r.Started.UTC().Format("15:04:05"), o)
		}
		if r.Soak != nil {
			fmt.Fprintln(w)
			r.Soak.WriteMarkdown(w)
		}
	}
}

// writeMatrixHead prints the verdict line, the runs' span and profiles and
// the table's legend and header.
func writeMatrixHead(w io.Writer, reps []*Report, rows []Row) {
	runs, pass, overlaps := 0, 0, 0
	profiles := map[string]bool{}
	var start, end time.Time
	for _, r := range reps {
		profiles[fmt.Sprintf("%s (TTL %s, renew %s, stop_timeout %s, kill_grace %s, poll %s; etcd %s)",
			r.Profile.Name, r.Profile.TTL, r.Profile.Renew, r.Profile.StopTimeout, r.Profile.KillGrace, r.Profile.Poll, etcdOf(r.Profile))] = true
		overlaps += len(r.Overlaps)
		if start.IsZero() || r.Started.Before(start) {
			start = r.Started
		}
		if r.Ended.After(end) {
			end = r.Ended
		}
	}
	for _, row := range rows {
		runs += row.Runs
		pass += row.Passes
	}
	profs := slices.Sorted(maps.Keys(profiles))
	fmt.Fprintf(w, "## Failure matrix: %d/%d runs passed, %d overlap interval(s)\n\n", pass, runs, overlaps)
	fmt.Fprintf(w, "%d report(s), %s to %s UTC. Timing profile: %s.\n", len(reps),
		start.UTC().Format("2006-01-02 15:04:05"), end.UTC().Format("15:04:05"), strings.Join(profs, "; "))
	fmt.Fprintln(w, "Times are milliseconds from the fault: median (min–max) over the runs.")
	fmt.Fprintln(w, "stopped = last heartbeat of the old leader's units; won = another node holds the election key")
	fmt.Fprintln(w, "(as seen by an observer on an uncut subnet); failover = every unit beating on the new leader;")
	fmt.Fprintln(w, "margin = won minus the old units' last heartbeat (positive: stopped before anyone could win);")
	fmt.Fprintln(w, "unavailable = longest span in which a unit ran nowhere. Overlap uses alive = last heartbeat + 40 ms.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| # | fault | expected | verdict | stopped | won | failover | margin | unavailable | overlap | other measurements, notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
}

// matrixCells is one row of the matrix table.
func matrixCells(row Row) []string {
	cells := []string{fmt.Sprint(row.ID), esc(row.Fault), esc(row.Expected), row.Verdict()}
	for _, k := range standard {
		cells = append(cells, row.Metrics[k].String())
	}
	ov := fmt.Sprintf("%.0f ms", row.OverlapMS)
	if row.Excused > 0 {
		ov += fmt.Sprintf(" (+%d by hand, see notes)", row.Excused)
	}
	cells = append(cells, ov)
	var other []string
	for _, k := range slices.Sorted(maps.Keys(row.Metrics)) {
		if !slices.Contains(standard, k) {
			other = append(other, k+" "+row.Metrics[k].String())
		}
	}
	other = append(other, row.Notes...)
	return append(cells, esc(strings.Join(other, "; ")))
}

// Verdict is "PASS n/n" or "**FAIL** passes/runs".
func (row Row) Verdict() string {
	if row.Passes != row.Runs {
		return fmt.Sprintf("**FAIL** %d/%d", row.Passes, row.Runs)
	}
	return fmt.Sprintf("PASS %d/%d", row.Passes, row.Runs)
}

func esc(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", "\\|"), "\n", " ") }
