package plane

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Reference is the leader-election timing every other mode is compared
// with: client-go's lease 5 s, renew deadline 3 s, retry 1 s, the smallest
// tested timing that rides out a 3 s stall of etcd's raft leader as the
// fast profiles do (4/3/1 lost its Lease in 2 of 5 stalls, 4/2/1 and 3/2/1
// in every one: docs/failure-modes.md).
const Reference = "le-tuned"

// StallScenario is the comparison's robustness fault: etcd's raft leader
// stopped (SIGSTOP) for 3 s, which a stock etcd rides out.
const StallScenario = 71

// step is the figures' resolution: the prober creates a pod and lists the
// pods every probe.CreateEvery, so a pod created after the fault waits up to
// one step for its creation, and a replacement is seen up to one step late.
// A median slower than le-tuned's by less than one step is reported apart
// from the faults on which a mode is slower: five trials cannot tell it from
// the probe's phase (scenario 47, where no leadership moves, measured
// 0.05-0.27 s for every mode).
const step = probe.CreateEvery

// figure is one figure of the comparison: its name in the table and how to
// read it from a group.
type figure struct {
	name string
	of   func(Group) report.Stat
}

var compared = []figure{
	{"scheduler back", func(g Group) report.Stat { return g.Sched }},
	{"service resumed", func(g Group) report.Stat { return g.Resumed }},
}

// WriteComparison writes the fair table: per fault, each mode's median
// scheduler back and service resumed (the later of the longest pod unbound
// and the longest unreplaced ReplicaSet pod), with its ratio to
// Reference's; then per mode its robustness (what the etcd stall did to
// it), its harm over every fault, the faults on which its median is
// slower than Reference's, and apart from them those on which it is slower
// by less than the probe's step (kha-supervisor's modes only: the other
// leader-election timings are there for their robustness). Without
// Reference among gs, nothing.
func WriteComparison(w io.Writer, gs []Group) {
	modes, ids := modesAndIDs(gs)
	if !slices.Contains(modes, Reference) {
		return
	}
	find := func(id int, mode string) (Group, bool) { return findGroup(gs, id, mode) }
	fmt.Fprintf(w, "| fault | figure (median) | %s |\n", strings.Join(modes, " | "))
	fmt.Fprintf(w, "|---|---|%s\n", strings.Repeat("---|", len(modes)))
	slower, level := map[string][]string{}, map[string][]string{}
	for _, id := range ids {
		ref, hasRef := find(id, Reference)
		for _, f := range compared {
			cells := make([]string, 0, len(modes))
			for _, m := range modes {
				g, ok := find(id, m)
				if !ok || f.of(g).N == 0 {
					cells = append(cells, "-")
					continue
				}
				cell := fmt.Sprintf("%.2f s", f.of(g).Median/1000)
				if m != Reference && hasRef && f.of(ref).N > 0 {
					r := f.of(g).Median / f.of(ref).Median
					cell += fmt.Sprintf(" (%.2fx)", r)
					verdict := fmt.Sprintf("%d %s %.2fx", id, f.name, r)
					switch by := f.of(g).Median - f.of(ref).Median; {
					case r <= 1 || !strings.HasPrefix(m, "kha-"):
					case by < float64(step.Milliseconds()):
						level[m] = append(level[m], fmt.Sprintf("%s (+%.2f s)", verdict, by/1000))
					default:
						slower[m] = append(slower[m], verdict)
					}
				}
				cells = append(cells, cell)
			}
			fmt.Fprintf(w, "| %d %s | %s | %s |\n", id, firstGroup(gs, id).Scenario, f.name, strings.Join(cells, " | "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Ratios are the mode's median over %s's (< 1: faster). A median slower by less than %.1f s is listed apart: "+
		"the prober creates a pod and lists the pods every %.1f s, so five trials cannot tell such a difference from where the "+
		"fault fell between two of its steps. Per mode, over every fault above:\n\n", Reference, step.Seconds(), step.Seconds())
	fmt.Fprintf(w, "| mode | etcd raft leader stalled 3 s (%d): leader moved | a component exited | trials | overlap at the resource | late commits at etcd | slower than %s (median) | slower by less than the probe's %.1f s step |\n", StallScenario, Reference, step.Seconds())
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, m := range modes {
		moved, exited := "not measured", "not measured"
		if g, ok := find(StallScenario, m); ok {
			moved = fmt.Sprintf("%d/%d", g.Moved, len(g.Trials))
			exited = fmt.Sprintf("%d/%d", g.Exited, len(g.Trials))
		}
		var trials, overlaps, late int
		for _, g := range gs {
			if g.Mode == m {
				trials += len(g.Trials)
				overlaps += g.Overlaps
				late += g.Late
			}
		}
		worse, near := "-", "-"
		if strings.HasPrefix(m, "kha-") {
			worse, near = listOr(slower[m], "no fault"), listOr(level[m], "none")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d intervals | %d | %s | %s |\n", m, moved, exited, trials, overlaps, late, worse, near)
	}
}

// listOr joins items, or says none.
func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, "; ")
}

// modesAndIDs are the modes and scenarios of gs in the order they first
// appear.
func modesAndIDs(gs []Group) (modes []string, ids []int) {
	for _, g := range gs {
		if !slices.Contains(modes, g.Mode) {
			modes = append(modes, g.Mode)
		}
		if !slices.Contains(ids, g.ID) {
			ids = append(ids, g.ID)
		}
	}
	return modes, ids
}

// findGroup is scenario id in mode among gs.
func findGroup(gs []Group, id int, mode string) (Group, bool) {
	i := slices.IndexFunc(gs, func(g Group) bool { return g.ID == id && g.Mode == mode })
	if i < 0 {
		return Group{}, false
	}
	return gs[i], true
}

// firstGroup is the first group of scenario id among gs.
func firstGroup(gs []Group, id int) Group {
	if i := slices.IndexFunc(gs, func(g Group) bool { return g.ID == id }); i >= 0 {
		return gs[i]
	}
	return Group{}
}
