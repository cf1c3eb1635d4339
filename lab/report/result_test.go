package report

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// One Mark for both planes: the real plane's runs saved before it named
// the label "what"; they still load, and a saved Mark loads as it was.
func TestMarkReadsBothPlanesRuns(t *testing.T) {
	var old Mark
	if err := json.Unmarshal([]byte(`{"key":"evicted","at":"2026-12-02T01:02:03Z","what":"P1 evicted","owner":"Kubernetes","source":"audit log"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Key != "evicted" || old.Label != "P1 evicted" || old.Owner != "Kubernetes" || old.Source != "audit log" || old.At.IsZero() {
		t.Errorf("a real-plane mark saved with \"what\": %+v", old)
	}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var again Mark
	if err := json.Unmarshal(b, &again); err != nil || again != old {
		t.Errorf("round trip: %+v, %v; want %+v", again, err, old)
	}
	var standIn Mark
	if err := json.Unmarshal([]byte(`{"at":"2026-12-02T01:02:03Z","label":"heal","node":"m1"}`), &standIn); err != nil || standIn.Label != "heal" || standIn.Node != "m1" {
		t.Errorf("a stand-in mark: %+v, %v", standIn, err)
	}
}

// One Result for both planes: a real-plane trial saved before it (the
// name under "scenario", the scenario's own figures a plain map) loads
// with its name and figures in place, and saves and loads back the same,
// with the real plane's part only.
func TestResultReadsARealPlaneTrialOfBefore(t *testing.T) {
	old := `{"id": 58, "scenario": "real: frozen", "mode": "kha-fast-token", "repeat": 1, "leader": "m1", "cm_leader": "m1",
		"new_leader": "m2", "fault_at": "2026-12-02T17:42:12Z", "scheduler_ms": 21914.226, "double_binds": 0,
		"figures": {"frozen_ms": 45589, "stale_token": 1485}, "heal_at": "2026-12-02T17:43:00Z",
		"handoff": {"kube-scheduler": {"last_old_ms": 2175.184}}, "pass": true, "etcd": "etcd revisions 43", "late_commits": 0}`
	var r Result
	if err := json.Unmarshal([]byte(old), &r); err != nil {
		t.Fatal(err)
	}
	if r.Name != "real: frozen" || r.Mode != "kha-fast-token" || r.SchedMS != 21914.226 || r.CMLeader != "m1" || r.HealAt.IsZero() || !r.Pass {
		t.Errorf("loaded: %+v", r)
	}
	if len(r.Figures.Values) != 2 || r.Figures.Values["frozen_ms"] != 45589 || r.Figures.Values["stale_token"] != 1485 {
		t.Errorf("the scenario's own figures: %+v", r.Figures)
	}
	if h := r.Handoff["kube-scheduler"]; h.LastOldMS == nil || *h.LastOldMS != 2175.184 || h.FirstOtherMS != nil {
		t.Errorf("the handoff: %v", h)
	}
	b := roundTrip(t, r)
	for _, want := range []string{`"name":"real: frozen"`, `"figures":{"values":{"frozen_ms":45589,"stale_token":1485}}`, `"double_binds":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("saved without %s: %s", want, b)
		}
	}
	for _, not := range []string{`"scenario"`, `"metrics_ms"`, `"expected"`, `"start"`} {
		if strings.Contains(string(b), not) {
			t.Errorf("saved with %s (the stand-in's part, or the old name): %s", not, b)
		}
	}
}

// A stand-in result (the saved matrix run of testdata) saves and loads
// back the same, its typed figures in place and without the real plane's
// part.
func TestResultStandInRoundTrip(t *testing.T) {
	reps, err := Load(filepath.Join("testdata", "matrix-20261202-144419.json"))
	if err != nil {
		t.Fatal(err)
	}
	var typed int
	for _, r := range reps[0].Results {
		if r.Name == "" || r.Metrics == nil || r.Start.IsZero() {
			t.Errorf("scenario %d loaded without its name, metrics or start: %+v", r.ID, r)
		}
		if !reflect.ValueOf(r.Figures).IsZero() {
			typed++
		}
		b := roundTrip(t, r)
		for _, not := range []string{`"scheduler_ms"`, `"cm_leader"`, `"double_binds"`, `"late_commits"`} {
			if strings.Contains(string(b), not) {
				t.Errorf("scenario %d saved with %s (the real plane's part): %s", r.ID, not, b)
			}
		}
	}
	if typed == 0 {
		t.Error("no result with typed figures: the test reads nothing of them")
	}
}

// roundTrip saves r and loads it back, failing unless it is the same.
func roundTrip(t *testing.T, r Result) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var again Result
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, r) {
		t.Errorf("round trip of scenario %d:\n got %+v\nwant %+v", r.ID, again, r)
	}
	return b
}
