package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kha-supervisor/kha-supervisor/fencing/procscan"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
)

// The drop-in and stray findings in Status reach the gauges the shipped
// alert rules watch, per unit.
func TestExportProblems(t *testing.T) {
	units := []string{"kube-controller-manager.service", "kube-scheduler.service"}
	m, err := httpapi.NewMetrics(prometheus.NewRegistry(), httpapi.WithUnits(units...))
	if err != nil {
		t.Fatal(err)
	}
	exportProblems(m, units, supervisor.Status{
		DropinProblems: []string{"kube-scheduler.service: ExecStartPre lacks the guard; run `kha-supervisor install-dropins`"},
		Strays: []supervisor.StrayProcess{
			{Proc: procscan.Proc{PID: 10}, Unit: "kube-scheduler.service"},
			{Proc: procscan.Proc{PID: 11}, Unit: "kube-scheduler.service"},
			{Proc: procscan.Proc{PID: 12}},
		},
	})
	for _, c := range []struct {
		g     *prometheus.GaugeVec
		label string
		want  float64
	}{
		{m.DropinMismatch, "kube-scheduler.service", 1},
		{m.DropinMismatch, "kube-controller-manager.service", 0},
		{m.StrayProcesses, "kube-scheduler.service", 2},
		{m.StrayProcesses, "kube-controller-manager.service", 0},
		{m.StrayProcesses, "units.processes", 1},
	} {
		if got := testutil.ToFloat64(c.g.WithLabelValues(c.label)); got != c.want {
			t.Errorf("%s = %v, want %v", c.label, got, c.want)
		}
	}
	// Fixed: back to zero on the next export.
	exportProblems(m, units, supervisor.Status{})
	if got := testutil.ToFloat64(m.DropinMismatch.WithLabelValues("kube-scheduler.service")); got != 0 {
		t.Errorf("mismatch after the fix = %v, want 0", got)
	}
	if got := testutil.ToFloat64(m.StrayProcesses.WithLabelValues("units.processes")); got != 0 {
		t.Errorf("strays by units.processes after they are gone = %v, want 0", got)
	}
}
