package plane

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// stat is a median with its spread.
type stat struct {
	med, min, max float64
	n             int
}

func stats(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{med: med, min: s[0], max: s[len(s)-1], n: len(s)}
}

func (s stat) String() string {
	if s.n == 0 {
		return "-"
	}
	if s.n == 1 {
		return fmt.Sprintf("%.2f s", s.med/1000)
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f]", s.med/1000, s.min/1000, s.max/1000)
}

// WriteTable writes the side-by-side: per scenario and mode the median
// and spread of each figure, the verdict at the resource, and the ratio of
// kha-supervisor to leader election.
func WriteTable(w io.Writer, results []Result) {
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
	fmt.Fprintln(w, "| scenario | mode | runs | scheduler back (fault -> first new pod bound) | longest pod unbound | controller-manager (longest unreplaced RS pod) | cold start (unit start -> first bind) | overlap at the resource | 409 double binds | RS pods beyond replicas | pass |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	med := map[key][2]float64{}
	for _, k := range keys {
		rs := by[k]
		var sched, unb, cm, cold []float64
		overl, dbl, extra, pass := 0, 0, 0, 0
		for _, r := range rs {
			if r.SchedMS > 0 {
				sched = append(sched, r.SchedMS)
			}
			unb = append(unb, r.UnboundMS)
			if r.CMMS > 0 {
				cm = append(cm, r.CMMS)
			}
			if r.ColdMS > 0 {
				cold = append(cold, r.ColdMS)
			}
			overl += len(r.Overlaps)
			dbl += r.DoubleBind
			extra = max(extra, r.ExtraRS)
			if r.Pass {
				pass++
			}
		}
		s, c := stats(sched), stats(cm)
		med[k] = [2]float64{s.med, c.med}
		fmt.Fprintf(w, "| %d %s | %s | %d | %s | %s | %s | %s | %d intervals | %d | %d | %d/%d |\n",
			k.id, strings.TrimPrefix(rs[0].Scenario, "real: "), k.mode, len(rs), s, stats(unb), c, stats(cold), overl, dbl, extra, pass, len(rs))
	}
	fmt.Fprintln(w)
	var ids []int
	for _, k := range keys {
		if !slices.Contains(ids, k.id) {
			ids = append(ids, k.id)
		}
	}
	for _, id := range ids {
		for _, pair := range [][2]string{{"kha-fast", "le-tuned"}, {"kha-default", "le-defaults"}} {
			a, okA := med[key{id, pair[0]}]
			b, okB := med[key{id, pair[1]}]
			if !okA || !okB || b[0] == 0 || b[1] == 0 {
				continue
			}
			fmt.Fprintf(w, "- scenario %d, %s / %s: scheduler %.2f, controller-manager %.2f (median / median; < 1: kha-supervisor faster)\n",
				id, pair[0], pair[1], a[0]/b[0], a[1]/b[1])
		}
	}
}
