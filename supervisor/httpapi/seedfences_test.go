package httpapi

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The fences of earlier processes (a fence always ends its process) count
// in kha_fences_total and set the last-fence gauges; a new fence follows.
func TestSeedFencesSurviveTheRestart(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.LastFence); got != 0 {
		t.Fatalf("last fence before any = %v, want 0", got)
	}
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	m.SeedFences([]PastFence{{At: t2, Reason: "key_lost"}, {At: t1, Reason: "deadline"}, {At: t1.Add(time.Minute), Reason: "deadline"}})
	for reason, want := range map[string]float64{"deadline": 2, "key_lost": 1, "lease_lost": 0} {
		if got := testutil.ToFloat64(m.Fences.WithLabelValues(reason)); got != want {
			t.Errorf("kha_fences_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.LastFence); got != float64(t2.Unix()) {
		t.Errorf("last fence = %v, want %d (the newest, whatever the order given)", got, t2.Unix())
	}
	if n := testutil.CollectAndCount(m.LastFenceInfo); n != 1 || testutil.ToFloat64(m.LastFenceInfo.WithLabelValues("key_lost")) != 1 {
		t.Errorf("last fence info: %d series, want one for key_lost", n)
	}
	m.Fenced("lease_lost")
	if testutil.ToFloat64(m.LastFence) <= float64(t2.Unix()) || testutil.CollectAndCount(m.LastFenceInfo) != 1 {
		t.Error("a new fence did not become the last one")
	}
}
