package plane

import (
	"fmt"
	"io"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Group is one scenario in one mode (report.Group) with the real plane's
// figures of its trials.
type Group struct {
	report.Group
	Scenario string // without "real: "

	Sched, Unbound, CM, Cold, Resumed report.Stat
	// Holder: the scheduler back under the master that leads at the end
	// of the trial (holderMS).
	Holder report.Stat
	// Margin: the scheduler's handoff at the resource, other master's
	// first write - old master's last (only trials with both).
	Margin                       report.Stat
	Overlaps, DoubleBinds, Extra int
	// Late: late commits at etcd, summed over the trials.
	Late                        int
	Pass, Findings, LabFailures int
	// Moved: trials after which another master led; Exited: trials in
	// which a component that ran before the fault exited (Result.Exits).
	Moved, Exited int
}

// Groups folds results into groups, by scenario then in the order the
// modes first appear (report.GroupResults), with their figures.
func Groups(results []report.Result) []Group {
	var out []Group
	for _, rg := range report.GroupResults(results) {
		out = append(out, group(rg))
	}
	return out
}

func group(rg report.Group) Group {
	g := Group{Group: rg, Scenario: strings.TrimPrefix(rg.Name, "real: ")}
	rs := rg.Trials
	var sched, unb, cm, cold, res, margin, holder []float64
	for _, r := range rs {
		if r.FaultAt.IsZero() {
			// Its setup failed: no fault, no figures; only the verdict.
			g.LabFailures++
			continue
		}
		if r.SchedMS > 0 {
			sched = append(sched, r.SchedMS)
		}
		if h, ok := holderMS(r); ok {
			holder = append(holder, h)
		}
		unb = append(unb, r.UnboundMS)
		if r.CMMS > 0 {
			cm = append(cm, r.CMMS)
		}
		if r.ColdMS > 0 {
			cold = append(cold, r.ColdMS)
		}
		if r.ResumedMS() > 0 {
			res = append(res, r.ResumedMS())
		}
		if m, ok := r.Handoff[audit.Scheduler].MarginMS(); ok {
			margin = append(margin, m)
		}
		if r.NewLeader != "" && r.NewLeader != r.Leader {
			g.Moved++
		}
		if len(r.Exits) > 0 {
			g.Exited++
		}
		g.Overlaps += len(r.Overlaps)
		g.Late += r.LateCommits
		g.DoubleBinds += r.DoubleBind
		g.Extra = max(g.Extra, r.ExtraRS)
		switch {
		case r.Pass:
			g.Pass++
		case r.LabFailure():
			g.LabFailures++
		default:
			g.Findings++
		}
	}
	sum := report.Summarize
	g.Sched, g.Unbound, g.CM, g.Cold, g.Resumed, g.Margin = sum(sched), sum(unb), sum(cm), sum(cold), sum(res), sum(margin)
	g.Holder = sum(holder)
	return g
}

// holderMS is fault -> the first scheduler write of the master that leads
// at the end of the trial: "scheduler back" when the leadership stayed,
// else the other master's first accepted scheduler write after the fault.
// It tells a takeover from a deposed leader that binds again at a heal and
// then loses its lease (the flaps under leader election), whose "scheduler
// back" is followed by an outage that figure does not show. Under leader
// election that first write is the new leader's Lease update, a little
// before its first binding, so the figure flatters leader election. A
// leadership that moved and came back (A, B, A) reads as kept. False when
// the leader at the end is not known (the trial failed before it was
// read), when nothing was bound, or when the new leader never wrote within
// the trial.
func holderMS(r report.Result) (float64, bool) {
	if r.NewLeader == "" {
		return 0, false
	}
	if r.NewLeader == r.Leader {
		return r.SchedMS, r.SchedMS > 0
	}
	first := r.Handoff[audit.Scheduler].FirstOtherMS
	if first == nil {
		return 0, false
	}
	return *first, true
}

// PassCell is the pass column: passed/runs, and leader election's
// findings (both masters wrote) apart from failures of the lab.
func (g Group) PassCell() string {
	s := fmt.Sprintf("%d/%d", g.Pass, len(g.Trials))
	if g.Findings > 0 {
		s += fmt.Sprintf(" (%d le finding)", g.Findings)
	}
	return s
}

// Pairs are the modes compared: kha-supervisor's profile and leader
// election's timing of about the same speed (fast-kill's lease is shorter
// than le-tuned's, its window no shorter than le-tuned's renew deadline).
var Pairs = [][2]string{{"kha-fast", "le-tuned"}, {"kha-fast-kill", "le-tuned"}, {"kha-default", "le-defaults"}}

// WriteTable writes the side-by-side: per scenario and mode the median
// and spread of each figure, the verdict at the resource, and the ratio of
// kha-supervisor to leader election.
func WriteTable(w io.Writer, results []report.Result) {
	fmt.Fprintln(w, "| scenario | mode | runs | scheduler back (fault -> first new pod bound) | longest pod unbound | controller-manager (longest unreplaced RS pod) | cold start (unit start -> first bind) | scheduler handoff at the resource (other master's first write - old one's last) | overlap at the resource | 409 double binds | RS pods beyond replicas | leader moved | a component exited | pass |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	gs := Groups(results)
	for _, g := range gs {
		fmt.Fprintf(w, "| %d %s | %s | %d | %s | %s | %s | %s | %s | %d intervals | %d | %d | %d/%d | %d/%d | %s |\n",
			g.ID, g.Scenario, g.Mode, len(g.Trials), g.Sched.Seconds(), g.Unbound.Seconds(), g.CM.Seconds(), g.Cold.Seconds(), g.Margin.Seconds(), g.Overlaps, g.DoubleBinds, g.Extra,
			g.Moved, len(g.Trials), g.Exited, len(g.Trials), g.PassCell())
	}
	fmt.Fprintln(w)
	WriteRatios(w, gs)
}

// WriteRatios writes kha-supervisor / leader election per scenario and pair.
func WriteRatios(w io.Writer, gs []Group) {
	find := func(id int, mode string) (Group, bool) { return findGroup(gs, id, mode) }
	_, ids := modesAndIDs(gs)
	for _, id := range ids {
		for _, pair := range Pairs {
			a, okA := find(id, pair[0])
			b, okB := find(id, pair[1])
			// The scheduler's outage is the longest pod unbound: "scheduler
			// back" can be the old leader's last binding (42, 48).
			if !okA || !okB || b.Unbound.Median == 0 || b.CM.Median == 0 {
				continue
			}
			fmt.Fprintf(w, "- scenario %d, %s / %s: scheduler (longest pod unbound) %.2f, controller-manager %.2f (median / median; < 1: kha-supervisor faster)\n",
				id, pair[0], pair[1], a.Unbound.Median/b.Unbound.Median, a.CM.Median/b.CM.Median)
		}
	}
}
