package report

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A real-plane run saves and loads back the same; a file that is not one,
// and no trials at all, are refused by name.
func TestTrialsSaveLoadAndRefuse(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)
	rs := []Result{
		{ID: 40, Name: "real: cut", Mode: "kha-fast", Repeat: 1, FaultAt: at, Pass: true,
			Figures: Figures{Values: map[string]float64{"cut_ms": 490}}, RealPlane: RealPlane{SchedMS: 6000, CMMS: 9000}},
		{ID: 40, Name: "real: cut", Mode: "kha-fast", Repeat: 2, Problems: []string{"setup: x"}},
	}
	path := filepath.Join(dir, "sidebyside.json")
	if err := SaveTrials(path, rs); err != nil {
		t.Fatal(err)
	}
	got, err := LoadTrials(path)
	if err != nil || !reflect.DeepEqual(got, rs) {
		t.Errorf("loaded %+v, %v; want %+v", got, err, rs)
	}
	bad := filepath.Join(dir, "matrix.json")
	if err := os.WriteFile(bad, []byte(`{"kind": "matrix"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTrials(path, bad); err == nil || !strings.Contains(err.Error(), "matrix.json: not a saved sidebyside run") {
		t.Errorf("a matrix report: %v, want it named", err)
	}
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTrials(empty); err == nil || !strings.Contains(err.Error(), "no trials") {
		t.Errorf("no trials: %v", err)
	}
}
