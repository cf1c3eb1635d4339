package plane

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// TestComparisonRatiosAndRobustnessAreTheRunsOwn: the fair table gives each
// mode's median over le-tuned's, names the faults on which a mode is
// slower, apart from them those on which it is slower by less than the
// probe's step, and reads the etcd stall's robustness from scenario 71's
// trials.
func TestComparisonRatiosAndRobustnessAreTheRunsOwn(t *testing.T) {
	trial := func(id int, mode string, sched, cm float64, moved bool, exits []string, late int) report.Result {
		r := report.Result{ID: id, Name: "real: fault", Mode: mode, FaultAt: t0, Pass: late == 0, Leader: "m1", NewLeader: "m1",
			RealPlane: report.RealPlane{SchedMS: sched, UnboundMS: sched, CMMS: cm, Exits: exits, LateCommits: late}}
		if moved {
			r.NewLeader = "m2"
		}
		return r
	}
	var rs []report.Result
	for range 5 {
		rs = append(rs,
			trial(40, "kha-fast-kill", 4800, 5200, true, []string{"m1/kube-scheduler stopped"}, 0),
			trial(40, "le-tuned", 6000, 7000, true, []string{"m1/kube-scheduler stopped"}, 0),
			trial(69, "kha-fast-kill", 5100, 4000, true, nil, 1),
			trial(69, "le-tuned", 3000, 6000, false, nil, 0),
			trial(71, "kha-fast-kill", 2000, 1000, false, nil, 0),
			trial(71, "le-tuned", 3000, 1000, true, []string{"m1/kube-scheduler started"}, 0),
			trial(47, "kha-fast-kill", 210, 400, false, nil, 0),
			trial(47, "le-tuned", 110, 40, false, nil, 0),
		)
	}
	var b strings.Builder
	WriteComparison(&b, Groups(rs))
	out := b.String()
	for _, want := range []string{
		"| fault | figure (median) | kha-fast-kill | le-tuned |",
		"| 40 fault | scheduler back | 4.80 s (0.80x) | 6.00 s |",
		"| 40 fault | service resumed | 5.20 s (0.74x) | 7.00 s |",
		"| 69 fault | scheduler back | 5.10 s (1.70x) | 3.00 s |",
		"| 47 fault | scheduler back | 0.21 s (1.91x) | 0.11 s |",
		"| 47 fault | service resumed | 0.40 s (3.64x) | 0.11 s |",
		"| kha-fast-kill | 0/5 | 0/5 | 20 | 0 intervals | 5 | 47 service resumed 3.64x; 69 scheduler back 1.70x | 47 scheduler back 1.91x (+0.10 s) |",
		"| le-tuned | 5/5 | 5/5 | 20 | 0 intervals | 0 | - | - |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}

	var none strings.Builder
	WriteComparison(&none, Groups(rs[:1]))
	if none.Len() != 0 {
		t.Errorf("a comparison without le-tuned was written:\n%s", none.String())
	}
}

// The fair table docs/failure-modes.md quotes is committed (the main run and
// the flapping partitions' run after it): each saved run still gives the
// verdict lines the document quotes (robustness, harm, the faults on which a
// mode is slower than le-tuned, and those by less than the probe's step).
func TestSavedFairRunGivesTheQuotedVerdicts(t *testing.T) {
	for file, wants := range map[string][]string{
		"sidebyside-20261205T233913.json": {
			"| 40 leader's rack cut off | scheduler back | 4.82 s (0.71x) | 6.76 s |",
			"| 69 flapping partition of the leader's rack | scheduler back | 8.73 s (2.70x) | 3.23 s |",
			"| 71 etcd raft leader stalled for 3 s (SIGSTOP) | scheduler back | 3.27 s (1.02x) | 3.19 s |",
			"| kha-fast-kill | 0/5 | 0/5 | 80 | 0 intervals | 2 | 69 scheduler back 2.70x; 69 service resumed 2.41x; 74 scheduler back 1.15x; 76 scheduler back 1.35x | 44 scheduler back 1.14x (+0.12 s); 45 scheduler back 1.04x (+0.06 s); 47 scheduler back 1.42x (+0.06 s); 71 scheduler back 1.02x (+0.07 s); 71 service resumed 1.00x (+0.00 s) |",
			"| le-tuned | 1/5 | 2/5 | 80 | 3 intervals | 27 | - | - |",
		},
		"sidebyside-20261205T192422.json": {
			"| 49 scheduler frozen (SIGSTOP) on the leader | scheduler back | 1.05 s (0.17x) | 6.07 s |",
		},
		"sidebyside-20261205T173506.json": {
			"| 49 scheduler frozen (SIGSTOP) on the leader | scheduler back | 1.14 s (0.19x) | 5.92 s |",
			"| 69 flapping partition of the leader's rack | scheduler back | 4.05 s (1.27x) | 3.19 s |",
			"| 71 etcd raft leader stalled for 3 s (SIGSTOP) | scheduler back | 3.11 s (1.90x) | 1.64 s |",
			"| 40 leader's rack cut off | scheduler back | 5.12 s (0.87x) | 5.90 s |",
			"| le-tuned | 1/5 | 1/5 | 80 | 5 intervals | 19 | - | - |",
		},
		"sidebyside-20261205T142453.json": {
			"| 69 flapping partition of the leader's rack | scheduler back | 4.32 s (1.34x) | 3.23 s |",
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | service resumed | 21.16 s (1.03x) | 20.62 s |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 0.09 s (0.02x) | 4.27 s |",
			"| 40 leader's rack cut off | scheduler back | 5.03 s (0.80x) | 6.28 s |",
			"| kha-fast-kill | 0/5 | 0/5 | 80 | 0 intervals | 0 | 69 scheduler back 1.34x; 70 service resumed 1.03x | 47 service resumed 1.01x (+0.00 s); 48 service resumed 1.01x (+0.08 s); 71 scheduler back 1.03x (+0.08 s); 71 service resumed 1.02x (+0.04 s) |",
			"| le-tuned | 0/5 | 0/5 | 80 | 4 intervals | 54 | - | - |",
		},
		"sidebyside-20261205T072352.json": {
			"| 69 flapping partition of the leader's rack | scheduler back | 4.94 s (1.53x) | 3.23 s |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 5.01 s (1.17x) | 4.29 s |",
			"| 76 flapping partition of the leader's rack behind a dead switch | scheduler back | 4.57 s (1.34x) | 3.42 s |",
			"| 40 leader's rack cut off | scheduler back | 5.11 s (0.78x) | 6.55 s |",
			"| kha-fast-kill | 0/5 | 0/5 | 80 | 0 intervals | 0 | 69 scheduler back 1.53x; 74 scheduler back 1.17x; 76 scheduler back 1.34x | 45 scheduler back 1.04x (+0.06 s); 45 service resumed 1.28x (+0.07 s); 71 scheduler back 1.01x (+0.04 s) |",
			"| le-tuned | 0/5 | 2/5 | 80 | 3 intervals | 34 | - | - |",
		},
		"sidebyside-20261204T221014.json": {
			"| 40 leader's rack cut off | scheduler back | 6.93 s (1.15x) | 5.06 s (0.84x) | 6.01 s |",
			"| 69 flapping partition of the leader's rack | scheduler back | 4.58 s (1.38x) | 4.39 s (1.33x) | 3.31 s |",
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | scheduler back | 19.15 s (0.92x) | 18.82 s (0.91x) | 20.79 s |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 6.00 s (1.38x) | 5.08 s (1.17x) | 4.33 s |",
			"| kha-fast-kill | 0/5 | 0/5 | 75 | 0 intervals | 1 | 45 service resumed 5.92x; 69 scheduler back 1.33x; 74 scheduler back 1.17x | 44 scheduler back 1.03x (+0.03 s); 45 scheduler back 1.07x (+0.12 s); 71 scheduler back 1.03x (+0.09 s) |",
			"| le-tuned | 1/5 | 2/5 | 75 | 3 intervals | 12 | - | - |",
		},
		"sidebyside-20261204T155841.json": {
			"| 40 leader's rack cut off | scheduler back | 6.97 s (1.10x) | 5.09 s (0.80x) | 6.34 s |",
			"| 44 graceful stop of the leader | scheduler back | 0.98 s (1.09x) | 1.03 s (1.14x) | 0.90 s |",
			"| 69 flapping partition of the leader's rack | scheduler back | 5.38 s (1.61x) | 4.43 s (1.32x) | 3.35 s |",
			"| kha-fast | 0/5 | 0/5 | 75 | 0 intervals | 0 | 40 scheduler back 1.10x; 41 scheduler back 1.05x; 45 service resumed 2.59x; 48 scheduler back 1.23x; 50 scheduler back 1.05x; 69 scheduler back 1.61x; 69 service resumed 1.47x; 70 scheduler back 1.27x; 74 scheduler back 1.39x | 40 service resumed 1.01x (+0.10 s); 41 service resumed 1.01x (+0.05 s); 44 scheduler back 1.09x (+0.08 s); 47 service resumed 1.06x (+0.01 s); 48 service resumed 1.01x (+0.09 s) |",
			"| kha-fast-kill | 0/5 | 0/5 | 75 | 0 intervals | 0 | 69 scheduler back 1.32x; 69 service resumed 1.19x; 70 scheduler back 1.32x; 70 service resumed 1.02x; 74 scheduler back 1.13x | 44 scheduler back 1.14x (+0.13 s); 47 scheduler back 1.62x (+0.09 s); 47 service resumed 1.17x (+0.04 s) |",
			"| le-tuned | 0/5 | 0/5 | 75 | 2 intervals | 8 | - | - |",
		},
		"sidebyside-20261204T124628.json": {
			"| kha-fast | 0/5 | 0/5 | 75 | 0 intervals | 0 | 40 scheduler back 1.04x; 41 service resumed 1.11x; 44 scheduler back 1.37x; 48 scheduler back 1.16x; 48 service resumed 1.20x; 50 scheduler back 1.09x; 69 service resumed 4.03x; 70 service resumed 1.03x; 74 scheduler back 1.30x | 40 service resumed 1.00x (+0.00 s); 47 scheduler back 1.02x (+0.00 s); 69 scheduler back 1.03x (+0.11 s); 74 service resumed 1.02x (+0.12 s) |",
			"| kha-fast-kill | 0/5 | 0/5 | 75 | 0 intervals | 0 | 44 scheduler back 1.61x; 69 scheduler back 5.72x; 69 service resumed 3.07x; 70 service resumed 1.01x; 74 scheduler back 1.23x | none |",
			"| le-tuned | 1/5 | 1/5 | 75 | 4 intervals | 13 | - | - |",
			"| 40 leader's rack cut off | scheduler back | 6.80 s (1.04x) | 4.97 s (0.76x) | 6.57 s |",
			"| 69 flapping partition of the leader's rack | scheduler back | 3.43 s (1.03x) | 18.95 s (5.72x) | 3.32 s |",
		},
		"sidebyside-20261203T223133.json": {
			"| kha-fast | 0/5 | 0/5 | 55 | 0 intervals | 0 | 40 scheduler back 1.16x; 40 service resumed 1.07x; 41 scheduler back 1.14x; 48 scheduler back 1.06x; 48 service resumed 1.06x; 71 service resumed 1.19x | 41 service resumed 1.03x (+0.19 s); 45 scheduler back 1.05x (+0.08 s); 45 service resumed 1.21x (+0.04 s); 47 scheduler back 1.98x (+0.10 s) |",
			"| kha-fast-kill | 0/5 | 0/5 | 55 | 0 intervals | 0 | no fault | 45 service resumed 1.04x (+0.01 s); 47 scheduler back 1.79x (+0.08 s); 47 service resumed 1.05x (+0.01 s) |",
			"| le-tuned | 0/5 | 0/5 | 55 | 3 intervals | 9 | - |",
		},
		"sidebyside-20261203T233209.json": {
			"| 69 flapping partition of the leader's rack | scheduler back | 0.07 s (0.02x) | 5.09 s (1.60x) | 3.18 s |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 6.90 s (1.63x) | 5.07 s (1.20x) | 4.24 s |",
			"| 74 flapping partition of the leader's rack, 4s cuts | service resumed | 6.79 s (1.17x) | 4.30 s (0.74x) | 5.82 s |",
			"| kha-fast-kill | not measured | not measured | 10 | 0 intervals | 0 | 69 scheduler back 1.60x; 74 scheduler back 1.20x |",
		},
		"sidebyside-20261204T030502.json": {
			"| 50 pods when the active's rack is cut off | scheduler back | 6.77 s (1.07x) | 4.86 s (0.77x) | 6.35 s |",
			"| kha-fast-kill | not measured | not measured | 5 | 0 intervals | 0 | no fault |",
		},
		"sidebyside-20261204T022321.json": {
			"| 69 flapping partition of the leader's rack | scheduler back | 4.30 s (1.35x) | 5.08 s (1.60x) | 3.18 s | 3.25 s (1.02x) |",
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | scheduler back | 18.06 s (0.87x) | 18.39 s (0.89x) | 20.73 s | 18.81 s (0.91x) |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 6.48 s (1.54x) | 4.93 s (1.17x) | 4.20 s | 4.35 s (1.04x) |",
			"| le-tuned | not measured | not measured | 15 | 2 intervals | 9 | - |",
			"| kha-default | not measured | not measured | 15 | 0 intervals | 0 | 74 service resumed 1.09x | 69 scheduler back 1.02x (+0.07 s); 74 scheduler back 1.04x (+0.15 s) |",
		},
		"sidebyside-20261204T074056.json": {
			"| 69 flapping partition of the leader's rack | scheduler back | 3.90 s (1.23x) | 3.88 s (1.22x) | 3.18 s | 3.30 s (1.04x) |",
			"| 69 flapping partition of the leader's rack | service resumed | 4.41 s (1.04x) | 2.52 s (0.60x) | 4.23 s | 3.33 s (0.79x) |",
			"| 74 flapping partition of the leader's rack, 4s cuts | scheduler back | 5.19 s (1.19x) | 4.90 s (1.12x) | 4.36 s | 4.30 s (0.99x) |",
			"| 74 flapping partition of the leader's rack, 4s cuts | service resumed | 5.40 s (0.95x) | 3.80 s (0.67x) | 5.70 s | 5.94 s (1.04x) |",
			"| kha-default | not measured | not measured | 10 | 0 intervals | 0 | 74 service resumed 1.04x | 69 scheduler back 1.04x (+0.12 s) |",
		},
		"sidebyside-20261204T081141.json": {
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | scheduler back | 18.36 s (0.90x) | 18.23 s (0.89x) | 20.40 s | 18.35 s (0.90x) |",
		},
		"sidebyside-20261204T090245.json": {
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | scheduler back | 18.31 s (0.87x) | 18.19 s (0.87x) | 20.96 s | 18.33 s (0.87x) |",
			"| 70 standby frozen while the leader's rack is cut, thawed, then healed | service resumed | 19.62 s (0.90x) | 19.48 s (0.90x) | 21.75 s | 19.49 s (0.90x) |",
			"| kha-fast-kill | not measured | not measured | 5 | 0 intervals | 0 | no fault |",
		},
	} {
		rs, err := report.LoadTrials(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		WriteComparison(&b, Groups(rs))
		for _, want := range wants {
			if !strings.Contains(b.String(), want) {
				t.Errorf("%s lacks %q:\n%s", file, want, b.String())
			}
		}
	}
}

// The guard's before and after runs (42-44, supervisors of 31e8ca6, then
// with kha-guard) are committed: each still gives the medians and spreads
// docs/failure-modes.md quotes ("the guard in a program of its own").
func TestSavedGuardRunsGiveTheQuotedFigures(t *testing.T) {
	type cell struct {
		id   int
		mode string
	}
	for file, wants := range map[string]map[cell][2]string{ // scheduler back, longest pod unbound
		"sidebyside-20261204T191331.json": {
			{42, "kha-fast"}: {"2.41 s [2.11-3.49]", "2.45 s [2.07-3.37]"}, {42, "kha-fast-kill"}: {"2.44 s [2.28-2.69]", "2.34 s [2.12-2.50]"},
			{43, "kha-fast"}: {"0.90 s [0.57-0.91]", "0.66 s [0.42-0.70]"}, {43, "kha-fast-kill"}: {"0.81 s [0.60-0.98]", "0.55 s [0.51-0.72]"},
			{44, "kha-fast"}: {"1.05 s [0.77-1.53]", "0.87 s [0.65-1.35]"}, {44, "kha-fast-kill"}: {"0.86 s [0.82-1.63]", "0.81 s [0.66-1.52]"},
		},
		"sidebyside-20261204T192614.json": {
			{42, "kha-fast"}: {"2.22 s [2.09-2.51]", "2.17 s [2.04-2.25]"}, {42, "kha-fast-kill"}: {"2.09 s [0.07-2.44]", "2.22 s [1.94-2.28]"},
			{43, "kha-fast"}: {"0.69 s [0.57-0.89]", "0.57 s [0.43-0.82]"}, {43, "kha-fast-kill"}: {"0.72 s [0.69-1.23]", "0.61 s [0.42-1.19]"},
			{44, "kha-fast"}: {"0.76 s [0.75-0.81]", "0.61 s [0.49-0.75]"}, {44, "kha-fast-kill"}: {"0.98 s [0.83-1.24]", "0.81 s [0.72-1.10]"},
		},
	} {
		rs, err := report.LoadTrials(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		sched, unbound := map[cell][]float64{}, map[cell][]float64{}
		for _, r := range rs {
			c := cell{r.ID, r.Mode}
			sched[c] = append(sched[c], r.SchedMS)
			unbound[c] = append(unbound[c], r.UnboundMS)
		}
		for c, want := range wants {
			got := [2]string{report.Summarize(sched[c]).Seconds(), report.Summarize(unbound[c]).Seconds()}
			if got != want || len(sched[c]) != 5 {
				t.Errorf("%s %d %s: %d trials, scheduler back / longest unbound %q, the document quotes %q", file, c.id, c.mode, len(sched[c]), got, want)
			}
		}
	}
}

// The night run of 4 December read at the resource (docs/failure-modes.md,
// "one run with kha-guard"): on the flaps, in how many trials the first
// binding after the fault was the old master's (the leader riding the cut)
// and the median of the other master's first write (the takeover itself),
// as the document quotes them.
func TestSavedNightRunGivesTheQuotedFlapFigures(t *testing.T) {
	type cell struct {
		id   int
		mode string
	}
	wants := map[cell]string{ // first binding by the old master; the other master's first write
		{69, "kha-fast"}: "1/5; 4.58 s [4.11-7.05]", {69, "kha-fast-kill"}: "0/5; 4.39 s [4.07-8.49]", {69, "le-tuned"}: "5/5; 8.96 s [4.25-9.28]",
		{74, "kha-fast"}: "1/5; 5.95 s [5.63-7.02]", {74, "kha-fast-kill"}: "0/5; 5.08 s [4.81-5.27]", {74, "le-tuned"}: "5/5; 5.61 s [5.03-10.99]",
	}
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261204T221014.json"))
	if err != nil {
		t.Fatal(err)
	}
	old, first := map[cell]int{}, map[cell][]float64{}
	n := map[cell]int{}
	for _, r := range rs {
		c := cell{r.ID, r.Mode}
		if _, ok := wants[c]; !ok {
			continue
		}
		n[c]++
		h := r.Handoff["kube-scheduler"]
		if h.FirstOtherMS == nil || r.SchedMS < *h.FirstOtherMS-1 {
			old[c]++
		}
		if h.FirstOtherMS != nil {
			first[c] = append(first[c], *h.FirstOtherMS)
		}
	}
	for c, want := range wants {
		got := fmt.Sprintf("%d/%d; %s", old[c], n[c], report.Summarize(first[c]).Seconds())
		if got != want {
			t.Errorf("%d %s: %q, the document quotes %q", c.id, c.mode, got, want)
		}
	}
}

// Scenario 45 (etcd's raft leader killed) pooled over every saved run that
// has it up to the morning of 5 December, when the document pooled them
// (docs/failure-modes.md, "45 pooled"): per mode the trials, the
// median service resumed (the later of the longest pod unbound and the
// longest unreplaced ReplicaSet pod) and how many trials had a wait of more
// than a second, as the document quotes them. One run's five trials flip
// its median when three of them catch etcd's election or request timeout.
func TestSavedRunsPooledOn45GiveTheQuotedFigures(t *testing.T) {
	wants := map[string]string{
		"kha-fast":      "25 trials, 0.23 s [0.21-8.98], 4 above 1 s",
		"kha-fast-kill": "30 trials, 0.23 s [0.20-8.96], 8 above 1 s",
		"le-tuned":      "25 trials, 0.22 s [0.20-8.85], 5 above 1 s",
	}
	rs := savedTrialsUpTo(t, "sidebyside-20261205T072352.json")
	resumed := map[string][]float64{}
	for _, r := range rs {
		if r.ID == 45 {
			resumed[r.Mode] = append(resumed[r.Mode], max(r.UnboundMS, r.CMMS))
		}
	}
	for mode, want := range wants {
		above := 0
		for _, v := range resumed[mode] {
			if v > 1000 {
				above++
			}
		}
		got := fmt.Sprintf("%d trials, %s, %d above 1 s", len(resumed[mode]), report.Summarize(resumed[mode]).Seconds(), above)
		if got != want {
			t.Errorf("45 %s pooled: %q, the document quotes %q", mode, got, want)
		}
	}
}

// savedTrialsUpTo loads the trials of every saved side-by-side run up to
// and including last: a pooled figure a document quotes must not move when
// a later run is saved.
func savedTrialsUpTo(t *testing.T, last string) []report.Result {
	t.Helper()
	all, err := filepath.Glob(filepath.Join("testdata", "sidebyside-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range all {
		if filepath.Base(p) <= last {
			paths = append(paths, p)
		}
	}
	rs, err := report.LoadTrials(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// 45 and 71 pooled over every saved run up to the evening of 5 December
// (docs/failure-modes.md, "a stopped scheduler found by its state"): the
// medians that say this run's ratios on them are draws, and how often each
// mode drew the slow (45) or the fast (71) mode.
func TestSavedRunsPooledOn45And71GiveTheQuotedFigures(t *testing.T) {
	wants := map[string]string{
		"45 kha-fast-kill": "40 trials, service resumed 0.24 s, scheduler back 1.69 s, 8 resumed above 2 s",
		"45 le-tuned":      "35 trials, service resumed 0.22 s, scheduler back 1.67 s, 4 resumed above 2 s",
		"71 kha-fast-kill": "45 trials, scheduler back 2.42 s, 25 under 2.5 s",
		"71 le-tuned":      "45 trials, scheduler back 3.12 s, 14 under 2.5 s",
	}
	rs := savedTrialsUpTo(t, "sidebyside-20261205T173506.json")
	resumed, sched := map[string][]float64{}, map[string][]float64{}
	for _, r := range rs {
		k := fmt.Sprintf("%d %s", r.ID, r.Mode)
		resumed[k] = append(resumed[k], max(r.UnboundMS, r.CMMS))
		sched[k] = append(sched[k], r.SchedMS)
	}
	secs := func(vs []float64) string { return fmt.Sprintf("%.2f s", report.Summarize(vs).Median/1000) }
	count := func(vs []float64, f func(float64) bool) int {
		n := 0
		for _, v := range vs {
			if f(v) {
				n++
			}
		}
		return n
	}
	for k, want := range wants {
		var got string
		if k[:2] == "45" {
			got = fmt.Sprintf("%d trials, service resumed %s, scheduler back %s, %d resumed above 2 s", len(resumed[k]),
				secs(resumed[k]), secs(sched[k]), count(resumed[k], func(v float64) bool { return v > 2000 }))
		} else {
			got = fmt.Sprintf("%d trials, scheduler back %s, %d under 2.5 s", len(sched[k]),
				secs(sched[k]), count(sched[k], func(v float64) bool { return v < 2500 }))
		}
		if got != want {
			t.Errorf("%s pooled: %q, the document quotes %q", k, got, want)
		}
	}
}

// Scenario 75 (a minority partition during a burst), the two runs of 5
// December (docs/failure-modes.md, "the late commit made to happen"): per
// mode the trials, how many had a late commit at etcd, how many late
// commits, and the scheduler back, as the document quotes them.
func TestSavedMinorityBurstRunsGiveTheQuotedFigures(t *testing.T) {
	wants := map[string]string{
		"kha-fast-kill":      "10 trials, 5 with a late commit, 6 late commits, scheduler back 5.76 s [5.48-6.36]",
		"kha-fast-kill-etcd": "10 trials, 0 with a late commit, 0 late commits, scheduler back 5.85 s [5.31-6.31]",
	}
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T012409.json"), filepath.Join("testdata", "sidebyside-20261205T013143.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID != 75 {
			t.Fatalf("scenario %d in the runs of 75", r.ID)
		}
	}
	got := tallyLate(rs, func(report.Result) bool { return true })
	for mode, want := range wants {
		g := got[mode]
		if g == nil {
			t.Errorf("%s: no trials", mode)
			continue
		}
		line := fmt.Sprintf("%d trials, %d with a late commit, %d late commits, scheduler back %s", g.trials, g.withLate, g.late, report.Summarize(g.sched).Seconds())
		if line != want {
			t.Errorf("75 %s: %q, the document quotes %q", mode, line, want)
		}
	}
}

// The re-measure of 70 after the rejoin was questioned (docs/failure-modes.md,
// 5 December): five kha-fast-kill trials (three, then two after a new
// `up`) and their scheduler back.
func TestSavedRejoinRunGivesTheQuotedFigures(t *testing.T) {
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T013956.json"), filepath.Join("testdata", "sidebyside-20261205T032627.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		if r.ID != 70 || r.Mode != "kha-fast-kill" || !r.Pass || r.LateCommits != 0 {
			t.Errorf("trial %d %s #%d: pass %v, %d late commits", r.ID, r.Mode, r.Repeat, r.Pass, r.LateCommits)
		}
		got = append(got, fmt.Sprintf("%.2f", r.SchedMS/1000))
	}
	if want := "18.40, 18.99, 18.63, 18.31, 18.31"; strings.Join(got, ", ") != want {
		t.Errorf("scheduler back %s, the document quotes %s", strings.Join(got, ", "), want)
	}
}

// Scenario 76 (69's flaps behind a dead switch) and 69, 5 December
// (docs/failure-modes.md, "a dead switch"): per scenario, mode and
// supervisor build the scheduler back, the longest pod unbound, the
// service resumed and the other master's first write, as the document
// quotes them; the first run with this change's supervisors and le-tuned,
// the second with the supervisors of before it.
func TestSavedSilentFlapRunsGiveTheQuotedFigures(t *testing.T) {
	type cell struct {
		file string
		id   int
		mode string
	}
	wants := map[cell]string{
		{"sidebyside-20261205T023334.json", 69, "kha-fast-kill"}: "3.78 s [0.02-4.31]; 3.66 s [2.31-3.75]; 4.00 s [3.61-5.44]; 3.95 s [3.78-4.31]",
		{"sidebyside-20261205T023334.json", 69, "le-tuned"}:      "3.20 s [3.19-3.25]; 3.25 s [3.14-3.73]; 6.59 s [3.41-17.02]; 9.02 s [4.02-18.83]",
		{"sidebyside-20261205T023334.json", 76, "kha-fast-kill"}: "4.03 s [3.45-4.59]; 2.63 s [2.32-4.18]; 4.02 s [3.90-4.40]; 4.17 s [3.90-14.29]",
		{"sidebyside-20261205T023334.json", 76, "le-tuned"}:      "3.40 s [3.27-3.50]; 3.59 s [1.96-4.20]; 9.72 s [7.60-18.40]; 14.39 s [3.80-20.75]",
		{"sidebyside-20261205T024905.json", 76, "kha-fast-kill"}: "4.26 s [0.02-4.36]; 2.82 s [2.57-3.86]; 4.13 s [3.86-5.99]; 4.28 s [4.06-4.36]",
		// Again with the judge that floors a key's first write by its
		// previous write's request (340f83b).
		{"sidebyside-20261205T042829.json", 76, "kha-fast-kill"}: "4.41 s [0.09-4.62]; 4.40 s [2.46-4.61]; 4.42 s [3.98-5.66]; 4.41 s [3.98-4.62]",
		{"sidebyside-20261205T042829.json", 76, "le-tuned"}:      "3.45 s [3.40-3.53]; 3.54 s [3.44-4.44]; 8.13 s [6.01-21.60]; 10.31 s [9.91-15.53]",
	}
	lates := map[cell]int{}
	got := map[cell][4][]float64{}
	for _, file := range []string{"sidebyside-20261205T023334.json", "sidebyside-20261205T024905.json", "sidebyside-20261205T042829.json"} {
		rs, err := report.LoadTrials(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			c := cell{file, r.ID, r.Mode}
			g := got[c]
			g[0] = append(g[0], r.SchedMS)
			g[1] = append(g[1], r.UnboundMS)
			g[2] = append(g[2], max(r.UnboundMS, r.CMMS))
			if h := r.Handoff["kube-scheduler"]; h.FirstOtherMS != nil {
				g[3] = append(g[3], *h.FirstOtherMS)
			}
			got[c] = g
			lates[c] += r.LateCommits
		}
	}
	for c, want := range map[cell]int{
		{"sidebyside-20261205T023334.json", 76, "le-tuned"}: 3,
		{"sidebyside-20261205T042829.json", 76, "le-tuned"}: 0, {"sidebyside-20261205T042829.json", 76, "kha-fast-kill"}: 0,
	} {
		if lates[c] != want {
			t.Errorf("%s %d %s: %d late commits, the document quotes %d", c.file, c.id, c.mode, lates[c], want)
		}
	}
	for c, want := range wants {
		g := got[c]
		if line := summaries(g[:]...); line != want || len(g[0]) != 5 {
			t.Errorf("%s %d %s: %d trials, %q, the document quotes %q", c.file, c.id, c.mode, len(g[0]), line, want)
		}
	}
}

// summaries is each figure's "median [min-max]" in seconds, joined by "; ".
func summaries(figures ...[]float64) string {
	var parts []string
	for _, v := range figures {
		parts = append(parts, report.Summarize(v).Seconds())
	}
	return strings.Join(parts, "; ")
}

// runCell is one scenario in one mode of a saved run.
type runCell struct {
	id   int
	mode string
}

// cellFigures is, per cell of rs, "scheduler back; longest pod unbound;
// service resumed" (summaries), its number of trials and in how many the
// leader moved.
func cellFigures(rs []report.Result) (lines map[runCell]string, trials, moved map[runCell]int) {
	got := map[runCell][3][]float64{}
	trials, moved = map[runCell]int{}, map[runCell]int{}
	for _, r := range rs {
		c := runCell{r.ID, r.Mode}
		g := got[c]
		g[0] = append(g[0], r.SchedMS)
		g[1] = append(g[1], r.UnboundMS)
		g[2] = append(g[2], max(r.UnboundMS, r.CMMS))
		got[c] = g
		trials[c]++
		if r.NewLeader != r.Leader {
			moved[c]++
		}
	}
	lines = map[runCell]string{}
	for c, g := range got {
		lines[c] = summaries(g[:]...)
	}
	return lines, trials, moved
}

// The three flaps with the default profile, fast-kill and le-tuned in one
// run (5 December, morning, supervisors of de5e768): the figures
// docs/failure-modes.md quotes, "scheduler back; longest pod unbound;
// service resumed" per cell, with every trial passed and no late commit.
func TestSavedFlapProfilesRunGivesTheQuotedFigures(t *testing.T) {
	const file = "sidebyside-20261205T051751.json"
	wants := map[runCell]string{
		{69, "kha-default"}:   "3.25 s [3.21-3.31]; 3.28 s [3.23-3.40]; 3.37 s [3.23-3.40]",
		{69, "kha-fast-kill"}: "0.10 s [0.04-4.07]; 3.48 s [2.22-3.85]; 4.02 s [3.87-4.33]",
		{69, "le-tuned"}:      "3.30 s [3.27-3.34]; 3.23 s [3.22-3.75]; 3.83 s [3.41-11.19]",
		{74, "kha-default"}:   "4.34 s [0.04-5.19]; 5.12 s [4.89-5.41]; 5.41 s [5.12-11.60]",
		{74, "kha-fast-kill"}: "4.88 s [0.03-5.60]; 3.70 s [3.28-4.56]; 5.24 s [4.92-5.41]",
		{74, "le-tuned"}:      "4.33 s [4.19-7.51]; 4.08 s [3.16-5.91]; 5.73 s [4.30-7.30]",
		{76, "kha-default"}:   "3.23 s [0.04-3.45]; 3.56 s [3.51-4.19]; 3.56 s [3.51-4.19]",
		{76, "kha-fast-kill"}: "3.69 s [0.08-4.32]; 2.86 s [2.07-3.99]; 4.20 s [3.63-5.61]",
		{76, "le-tuned"}:      "3.43 s [0.05-4.93]; 3.46 s [1.90-4.06]; 9.09 s [7.63-20.50]",
	}
	rs, err := report.LoadTrials(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !r.Pass || r.LateCommits != 0 {
			t.Errorf("%d %s #%d: pass %v, %d late commits; the document says every trial passed with none", r.ID, r.Mode, r.Repeat, r.Pass, r.LateCommits)
		}
	}
	lines, trials, _ := cellFigures(rs)
	if len(lines) != len(wants) {
		t.Errorf("%d cells in the run, the document quotes %d", len(lines), len(wants))
	}
	for c, want := range wants {
		if line := lines[c]; line != want || trials[c] != 5 {
			t.Errorf("%d %s: %d trials, %q, the document quotes %q", c.id, c.mode, trials[c], line, want)
		}
	}
}

// A lease of 5 s and of 6 s under fast-kill's other timings, against
// fast-kill itself and le-tuned (5 December, midday, supervisors of
// c4b91c8; docs/failure-modes.md, "a 5 s and a 6 s lease against the
// flaps"): per cell "scheduler back; longest pod unbound; service resumed"
// and in how many trials the leader moved, every kha-supervisor trial passed
// with no late commit (le-tuned: one, on a rack cut). And the API fence's
// scenarios 51-56 in the same lab.
func TestSavedLeaseTTLRunsGiveTheQuotedFigures(t *testing.T) {
	type want struct {
		line  string
		moved int
	}
	docBytes, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "failure-modes.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	for file, wants := range map[string]map[runCell]want{
		"sidebyside-20261205T104303.json": {
			{40, "kha-fast-kill"}:       {"4.81 s [4.66-5.20]; 3.29 s [3.10-5.00]; 4.59 s [4.40-5.24]", 5},
			{40, "kha-fast-kill-ttl5s"}: {"5.90 s [5.65-6.19]; 5.74 s [4.42-6.20]; 6.76 s [5.60-7.45]", 5},
			{40, "le-tuned"}:            {"6.51 s [5.65-7.43]; 6.41 s [5.40-7.31]; 7.48 s [6.82-9.20]", 5},
			{41, "kha-fast-kill"}:       {"4.67 s [4.65-5.04]; 3.12 s [3.02-4.91]; 4.58 s [4.51-5.02]", 5},
			{41, "kha-fast-kill-ttl5s"}: {"5.83 s [5.72-6.04]; 5.65 s [4.12-6.02]; 5.90 s [5.58-6.04]", 5},
			{41, "le-tuned"}:            {"6.37 s [4.95-7.10]; 4.93 s [4.72-5.98]; 6.63 s [5.89-6.90]", 5},
			{69, "kha-fast-kill"}:       {"3.83 s [0.03-4.54]; 2.35 s [2.23-3.07]; 4.21 s [3.62-4.75]", 5},
			{69, "kha-fast-kill-ttl5s"}: {"3.35 s [3.23-3.38]; 3.28 s [3.25-3.36]; 3.28 s [3.25-3.36]", 0},
			{69, "le-tuned"}:            {"3.19 s [0.03-3.35]; 3.40 s [3.08-3.93]; 6.54 s [3.45-7.57]", 5},
			{74, "kha-fast-kill"}:       {"4.85 s [0.06-4.99]; 3.31 s [3.23-3.35]; 5.05 s [4.15-5.35]", 5},
			{74, "kha-fast-kill-ttl5s"}: {"5.00 s [4.90-5.03]; 4.93 s [4.69-5.13]; 5.30 s [5.13-6.61]", 5},
			{74, "le-tuned"}:            {"4.24 s [0.02-4.40]; 4.14 s [4.03-4.23]; 6.50 s [5.70-7.73]", 5},
			{76, "kha-fast-kill"}:       {"3.76 s [0.06-4.59]; 2.95 s [2.17-4.20]; 4.60 s [3.55-5.29]", 5},
			{76, "kha-fast-kill-ttl5s"}: {"3.43 s [3.39-3.53]; 3.87 s [3.76-4.23]; 3.87 s [3.76-4.23]", 0},
			{76, "le-tuned"}:            {"3.38 s [0.04-3.41]; 3.25 s [2.06-3.61]; 9.81 s [7.20-18.56]", 5},
		},
		"sidebyside-20261205T113324.json": {
			{40, "kha-fast-kill-ttl6s"}: {"7.03 s [6.79-7.27]; 6.89 s [5.95-7.06]; 8.26 s [6.84-8.60]", 5},
			{40, "le-tuned"}:            {"6.29 s [5.45-6.83]; 6.25 s [3.91-6.65]; 7.41 s [4.90-8.03]", 5},
			{41, "kha-fast-kill-ttl6s"}: {"6.95 s [6.71-7.13]; 5.36 s [5.13-5.52]; 7.99 s [6.40-8.82]", 5},
			{41, "le-tuned"}:            {"6.12 s [5.94-6.53]; 4.87 s [4.55-5.90]; 6.11 s [5.90-7.51]", 5},
			{74, "kha-fast-kill-ttl6s"}: {"4.35 s [0.00-4.43]; 4.26 s [4.23-4.29]; 4.29 s [4.24-4.61]", 0},
			{74, "le-tuned"}:            {"4.17 s [0.03-4.27]; 4.23 s [2.59-4.97]; 5.91 s [5.10-7.72]", 5},
		},
	} {
		rs, err := report.LoadTrials(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		leLate := 0
		for _, r := range rs {
			if r.Mode == "le-tuned" {
				leLate += r.LateCommits
			} else if !r.Pass || r.LateCommits != 0 {
				t.Errorf("%s: %d %s #%d: pass %v, %d late commits; the document says every kha-supervisor trial passed with none", file, r.ID, r.Mode, r.Repeat, r.Pass, r.LateCommits)
			}
		}
		lines, trials, moved := cellFigures(rs)
		if len(lines) != len(wants) {
			t.Errorf("%s: %d cells in the run, the document quotes %d", file, len(lines), len(wants))
		}
		if want := map[string]int{"sidebyside-20261205T113324.json": 1}[file]; leLate != want {
			t.Errorf("%s: le-tuned's late commits at etcd %d, the document quotes %d", file, leLate, want)
		}
		for c, w := range wants {
			if line := lines[c]; line != w.line || trials[c] != 5 || moved[c] != w.moved {
				t.Errorf("%s: {%d, %q}: {%q, %d}, the document quotes {%q, %d} (%d trials)", file, c.id, c.mode, line, moved[c], w.line, w.moved, trials[c])
			}
			docMode := c.mode
			if file == "sidebyside-20261205T113324.json" && c.mode == "le-tuned" {
				docMode = "le-tuned (6 s run)"
			}
			quotesRow(t, doc, docMode, strings.Split(w.line, "; "), fmt.Sprintf("%d/5 |", w.moved))
		}
	}
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T112816.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, r := range rs {
		ids = append(ids, r.ID)
		if !r.Pass || r.Mode != "kha-fast-token" || r.Stale != 0 || r.LateCommits != 0 || len(r.Overlaps) != 0 {
			t.Errorf("%d %s: pass %v, %d stale accepted, %d late commits, overlaps %v; the document says 51-56 in token mode passed with none", r.ID, r.Mode, r.Pass, r.Stale, r.LateCommits, r.Overlaps)
		}
	}
	if !slices.Equal(ids, []int{51, 52, 53, 54, 55, 56}) {
		t.Errorf("the API fence's run has scenarios %v, want 51-56 once each", ids)
	}
}

// quotesRow checks that doc has a table row of mode whose cells hold each
// figure, in order (a ratio may follow each).
func quotesRow(t *testing.T, doc, mode string, figures []string, tail string) {
	t.Helper()
	for _, line := range strings.Split(doc, "\n") {
		rest, ok := strings.CutPrefix(line, "| ")
		if !ok {
			continue
		}
		if _, rest, ok = strings.Cut(rest, " | "+mode+" | "); !ok {
			continue
		}
		found := true
		for _, f := range figures {
			var ok bool
			if _, rest, ok = strings.Cut(rest, f); !ok {
				found = false
				break
			}
		}
		if found && strings.HasSuffix(line, tail) {
			return
		}
	}
	t.Errorf("docs/failure-modes.md has no row of %s quoting %v and ending %q", mode, figures, tail)
}

// The bounded hold measured on the real plane (branch hold-spike, commit
// 7a684e8, 5 December 09:35-09:50) gives the figures docs/architecture.md
// quotes for it ("Not taken: holding the units frozen instead of killing
// them"): per cell the median longest pod unbound and in how many trials
// the leader moved; every trial passed with no late commit.
func TestSavedBoundedHoldRunGivesTheQuotedFigures(t *testing.T) {
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T093531.json"))
	if err != nil {
		t.Fatal(err)
	}
	unbound, moved := map[runCell][]float64{}, map[runCell]int{}
	for _, r := range rs {
		if !r.Pass || r.LateCommits != 0 || len(r.Overlaps) != 0 {
			t.Errorf("%d %s #%d: pass %v, %d late commits, overlaps %v; the document says none", r.ID, r.Mode, r.Repeat, r.Pass, r.LateCommits, r.Overlaps)
		}
		c := runCell{r.ID, r.Mode}
		unbound[c] = append(unbound[c], r.UnboundMS)
		if r.NewLeader != r.Leader {
			moved[c]++
		}
	}
	for c, want := range map[runCell]string{{69, "kha-fast-kill-hold"}: "4.59 s", {76, "kha-fast-kill-hold"}: "4.07 s", {69, "le-tuned"}: "3.09 s", {76, "le-tuned"}: "2.03 s"} {
		if got := fmt.Sprintf("%.2f s", report.Summarize(unbound[c]).Median/1000); got != want || len(unbound[c]) != 5 {
			t.Errorf("%v: longest pod unbound %s over %d trials, the document quotes %s over 5", c, got, len(unbound[c]), want)
		}
	}
	if got := moved[runCell{69, "kha-fast-kill-hold"}] + moved[runCell{76, "kha-fast-kill-hold"}]; got != 7 {
		t.Errorf("the held leader moved in %d of 10 trials, the document quotes 7", got)
	}
}

// The flaps (69, 74, 76) pooled over every saved run up to the evening of 5
// December (docs/failure-modes.md, "the flaps: whose binding is back"):
// under le-tuned the leadership moves in nearly every trial, and the
// "scheduler back" figure is, in nearly every one, the old leader binding
// at the heal before it loses its Lease; the scheduler of the master that
// holds the lease afterwards (the old one where the leadership stayed, the
// new one's first write where it moved) is back much later. kha-supervisor
// hands over on these faults and its figure is the new leader's.
func TestSavedFlapsPooledByTheLeaseHolder(t *testing.T) {
	wants := map[string]string{
		"69 kha-fast-kill": "75 trials, moved 75, back by a leader that then lost the lease 0, scheduler back 4.54 s, by the lease's holder 4.64 s",
		"69 le-tuned":      "70 trials, moved 62, back by a leader that then lost the lease 52, scheduler back 3.22 s, by the lease's holder 9.08 s",
		"74 kha-fast-kill": "55 trials, moved 55, back by a leader that then lost the lease 0, scheduler back 4.99 s, by the lease's holder 5.08 s",
		"74 le-tuned":      "60 trials, moved 60, back by a leader that then lost the lease 46, scheduler back 4.27 s, by the lease's holder 6.18 s",
		"76 kha-fast-kill": "40 trials, moved 40, back by a leader that then lost the lease 4, scheduler back 4.20 s, by the lease's holder 4.40 s",
		"76 le-tuned":      "40 trials, moved 39, back by a leader that then lost the lease 33, scheduler back 3.43 s, by the lease's holder 9.58 s",
	}
	type pool struct {
		moved, deposed  int
		sched, byHolder []float64
	}
	pools := map[string]*pool{}
	for _, r := range savedTrialsUpTo(t, "sidebyside-20261205T173506.json") {
		if r.ID != 69 && r.ID != 74 && r.ID != 76 {
			continue
		}
		k := fmt.Sprintf("%d %s", r.ID, r.Mode)
		if _, ok := wants[k]; !ok {
			continue
		}
		holder, ok := holderMS(r)
		if !ok {
			continue // no leader read at the end, nothing bound, or the new leader never wrote
		}
		moved := r.Leader != r.NewLeader
		p := pools[k]
		if p == nil {
			p = &pool{}
			pools[k] = p
		}
		if moved {
			p.moved++
			// The first binding was the old leader's, 2 s or more into
			// the cut (earlier ones went out before the cut took hold).
			if r.SchedMS < holder-1 && r.SchedMS >= 2000 {
				p.deposed++
			}
		}
		p.sched = append(p.sched, r.SchedMS)
		p.byHolder = append(p.byHolder, holder)
	}
	secs := func(vs []float64) string { return fmt.Sprintf("%.2f s", report.Summarize(vs).Median/1000) }
	for k, want := range wants {
		p := pools[k]
		if p == nil {
			t.Errorf("%s: no saved trials", k)
			continue
		}
		got := fmt.Sprintf("%d trials, moved %d, back by a leader that then lost the lease %d, scheduler back %s, by the lease's holder %s",
			len(p.sched), p.moved, p.deposed, secs(p.sched), secs(p.byHolder))
		if got != want {
			t.Errorf("%s pooled: %q, the document quotes %q", k, got, want)
		}
	}
}

// The night of 6 December (docs/failure-modes.md, "the side-by-side on the
// final supervisors"): 46's late commits in the main run, none with
// [etcd_fence] right after, and 69's cold start against every other
// takeover's.
func TestSavedFinalRunsGiveTheQuotedFigures(t *testing.T) {
	rs, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261205T233913.json"), filepath.Join("testdata", "sidebyside-20261206T011610.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cold []float64
	for _, r := range rs {
		if r.Mode == "kha-fast-kill" && r.ID != 69 && r.ColdMS > 0 {
			cold = append(cold, r.ColdMS)
		}
	}
	got := tallyLate(rs, func(r report.Result) bool { return r.ID == 46 && strings.HasPrefix(r.Mode, "kha-") })
	wants := map[string]string{
		"kha-fast-kill":      "5 trials, 1 with a late commit, 2 late commits, 3 ghost writes, scheduler back 5.29 s [5.03-7.02]",
		"kha-fast-kill-etcd": "5 trials, 0 with a late commit, 0 late commits, 1 ghost writes, scheduler back 5.46 s [0.15-6.32]",
	}
	for mode, want := range wants {
		g := got[mode]
		if g == nil {
			t.Errorf("%s: no trials of 46", mode)
			continue
		}
		s := report.Summarize(g.sched)
		line := fmt.Sprintf("%d trials, %d with a late commit, %d late commits, %d ghost writes, scheduler back %s", g.trials, g.withLate, g.late, g.ghosts, s.Seconds())
		if line != want {
			t.Errorf("%s on 46: %q, the document quotes %q", mode, line, want)
		}
	}
	c := report.Summarize(cold)
	if line := fmt.Sprintf("%.2f-%.2f s (median %.2f s)", c.Min/1000, c.Max/1000, c.Median/1000); line != "0.35-2.03 s (median 0.56 s)" {
		t.Errorf("cold starts outside 69: %s, the document quotes 0.35-2.03 s (median 0.56 s)", line)
	}
	fence, err := report.LoadTrials(filepath.Join("testdata", "sidebyside-20261206T011913.json"))
	if err != nil {
		t.Fatal(err)
	}
	var passed, stale, refused, late, overlaps int
	for _, r := range fence {
		if r.Pass {
			passed++
		}
		stale += r.Stale
		refused += r.Refused
		late += r.LateCommits
		overlaps += len(r.Overlaps)
	}
	if line := fmt.Sprintf("%d of %d passed, %d stale accepted, %d refused, %d late commits, %d overlaps", passed, len(fence), stale, refused, late, overlaps); line != "6 of 6 passed, 0 stale accepted, 285 refused, 0 late commits, 0 overlaps" {
		t.Errorf("the API fence run: %s, the document quotes 6 of 6 passed, 0 stale accepted, 285 refused, 0 late commits, 0 overlaps", line)
	}
}

// lateTally is one mode's trials as the minority-partition sections quote
// them: how many, how many had a late commit at etcd, the late commits and
// ghost writes, and the scheduler back of each.
type lateTally struct {
	trials, withLate, late, ghosts int
	sched                          []float64
}

// tallyLate tallies the results keep accepts, by mode.
func tallyLate(rs []report.Result, keep func(report.Result) bool) map[string]*lateTally {
	got := map[string]*lateTally{}
	for _, r := range rs {
		if !keep(r) {
			continue
		}
		g := got[r.Mode]
		if g == nil {
			g = &lateTally{}
			got[r.Mode] = g
		}
		g.trials++
		g.late += r.LateCommits
		g.ghosts += r.GhostWrites
		if r.LateCommits > 0 {
			g.withLate++
		}
		g.sched = append(g.sched, r.SchedMS)
	}
	return got
}
