package plane

import (
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// TestComparisonRatiosAndRobustnessAreTheRunsOwn: the fair table gives each
// mode's median over le-tuned's, names the faults on which a mode is
// slower, and reads the etcd stall's robustness from scenario 71's trials.
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
		"| kha-fast-kill | 0/5 | 0/5 | 15 | 0 intervals | 5 | 69 scheduler back 1.70x |",
		"| le-tuned | 5/5 | 5/5 | 15 | 0 intervals | 0 | - |",
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
