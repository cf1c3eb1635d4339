package scenario

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

// RunMatrix runs the scenarios ids, repeats times over, saving the report
// into outDir after every scenario (a crash keeps what was measured).
func (e *Env) RunMatrix(ctx context.Context, ids []int, repeats int, outDir string) (*report.Report, string, error) {
	var scs []Scenario
	for _, id := range ids {
		sc, ok := Lookup(id)
		if !ok {
			return nil, "", fmt.Errorf("no scenario %d (see `kha-lab list`)", id)
		}
		if sc.OnRealPlane() {
			return nil, "", fmt.Errorf("scenario %d runs on the real control plane: kha-lab run --plane real %d", id, id)
		}
		scs = append(scs, sc)
	}
	rep := &report.Report{Kind: reportKind(ids), Started: time.Now(), Profile: report.TimingOf(e.Profile, e.Lab.EtcdTiming)}
	var path string
	for i := 1; i <= repeats; i++ {
		for _, sc := range scs {
			if ctx.Err() != nil {
				break
			}
			res := e.Execute(ctx, sc, i)
			rep.Results = append(rep.Results, res)
			rep.Ended = time.Now()
			e.finish(rep)
			var err error
			if path, err = rep.Save(outDir); err != nil {
				return rep, "", err
			}
		}
	}
	return rep, path, ctx.Err()
}

// finish runs the overlap check over the report's whole span, apart from
// overlaps a scenario caused by hand on purpose, and sets the verdict.
func (e *Env) finish(rep *report.Report) {
	_ = e.W.Refresh()
	var excused []string
	for _, r := range rep.Results {
		excused = append(excused, r.Excused...)
	}
	rep.Overlaps, rep.Excused = nil, excused
	for _, o := range witness.OverlapsBetween(e.W.Overlaps(), rep.Started, rep.Ended) {
		if !slices.Contains(excused, o.String()) {
			rep.Overlaps = append(rep.Overlaps, o.String())
		}
	}
	rep.Pass = len(rep.Overlaps) == 0 && len(rep.Results) > 0
	for _, r := range rep.Results {
		rep.Pass = rep.Pass && r.Pass
	}
}

// Soak injects random faults from SoakSet back to back for d, seeded, with
// the invariant checked after every fault and over the whole span.
func (e *Env) Soak(ctx context.Context, d time.Duration, seed uint64, outDir string, progress io.Writer) (*report.Report, string, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	set := SoakSet()
	rep := &report.Report{Kind: "soak", Started: time.Now(), Profile: report.TimingOf(e.Profile, e.Lab.EtcdTiming)}
	st := &report.SoakStats{Seed: seed, Requested: d.String(), Faults: map[string]int{}}
	rep.Soak = st
	deadline := rep.Started.Add(d)
	var path string
	for i := 1; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		sc, _ := Lookup(set[rng.IntN(len(set))])
		res := e.Execute(ctx, sc, i)
		rep.Results = append(rep.Results, res)
		st.Faults[fmt.Sprintf("%02d %s", sc.ID, sc.Name)]++
		if !res.Pass {
			st.Failed++
			first := ""
			if len(res.Problems) > 0 {
				first = res.Problems[0]
			}
			st.FailedIn = append(st.FailedIn, fmt.Sprintf("#%d scenario %d (%s): %s", i, sc.ID, sc.Name, first))
		}
		rep.Ended = time.Now()
		e.finish(rep)
		e.soakStats(rep)
		fmt.Fprintf(progress, "soak %s: #%d scenario %d %s: pass=%v overlap so far %.0f ms (%d)\n",
			time.Since(rep.Started).Round(time.Second), i, sc.ID, sc.Name, res.Pass, st.OverlapMS, st.OverlapCount)
		var err error
		if path, err = rep.Save(outDir); err != nil {
			return rep, "", err
		}
	}
	return rep, path, ctx.Err()
}

func (e *Env) soakStats(rep *report.Report) {
	st := rep.Soak
	st.Ran = rep.Ended.Sub(rep.Started).Round(time.Second).String()
	st.Transitions = len(e.Obs.LeaderChanges(rep.Started, rep.Ended))
	ins := e.W.Instances()
	var best witness.Interval
	for _, u := range Units() {
		g := witness.LongestGap(ins, u, rep.Started, rep.Ended)
		if g.To.Sub(g.From) > best.To.Sub(best.From) {
			best = g
		}
	}
	st.LongestGapMS = float64(best.To.Sub(best.From).Microseconds()) / 1000
	st.LongestGapIn = ""
	for _, r := range rep.Results {
		if !best.From.Before(r.Start) && best.From.Before(r.End) {
			st.LongestGapIn = fmt.Sprintf("scenario %d (%s)", r.ID, r.Name)
		}
	}
	st.OverlapCount = len(rep.Overlaps)
	st.OverlapMS = 0
	for _, o := range witness.OverlapsBetween(e.W.Overlaps(), rep.Started, rep.Ended) {
		if slices.Contains(rep.Overlaps, o.String()) {
			st.OverlapMS += float64(o.Duration().Microseconds()) / 1000
		}
	}
}
