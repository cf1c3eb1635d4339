package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// TestJudgeHealedAPIServer: scenario 61's verdict. An old-token write
// admitted after the heal began fails the trial, whether the probe saw it
// or only the audit log; one before the heal (storage gone: a dry run
// proves nothing) and the new token's do not; a probe that got no answer
// from the fence is no pass.
func TestJudgeHealedAPIServer(t *testing.T) {
	heal := time.Date(2026, 12, 2, 20, 0, 0, 0, time.UTC)
	ev := func(at time.Duration, token string, code int) audit.Event {
		return audit.Event{User: "system:kube-scheduler", Token: []string{token}, DryRun: true, Verb: "create",
			Resource: "events", Code: code, Received: heal.Add(at)}
	}
	for _, tc := range []struct {
		name    string
		figs    map[string]float64
		evs     []audit.Event
		problem string // "" none
	}{
		{"all refused", map[string]float64{"heal_old_refused": 40, "heal_new_admitted": 40},
			[]audit.Event{ev(-time.Second, "7", 201), ev(time.Second, "7", 422), ev(time.Second, "9", 201)}, ""},
		{"admitted by the probe", map[string]float64{"heal_old_admitted": 3, "heal_old_refused": 37},
			nil, "admitted the old token 7"},
		{"admitted at the audit log only", map[string]float64{"heal_old_refused": 40},
			[]audit.Event{ev(20*time.Millisecond, "7", 201)}, "1 writes in the audit logs"},
		{"no answer from the fence", map[string]float64{}, nil, "no old-token probe answered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &plane.Trial{Marks: map[string]time.Time{"heal-start": heal}}
			res := &report.Result{Figures: report.Figures{Values: map[string]float64{"stale_token": 7}}}
			for k, v := range tc.figs {
				res.Figures.Values[k] = v
			}
			judgeHealedAPIServer(tr, tc.evs, res)
			got := strings.Join(res.Problems, "; ")
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Errorf("problems %q, want %q", got, tc.problem)
			}
		})
	}
}
