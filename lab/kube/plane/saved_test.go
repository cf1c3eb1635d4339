package plane

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// savedRuns are two sidebyside runs of 2 December as kha-lab saved them
// (testdata, unchanged): scenarios 58 (token mode, the scenario's own
// figures) and 65-67 (kha-fast and kha-fast-gate, setups that failed).
var savedRuns = []string{"sidebyside-20261202T161407.json", "sidebyside-20261202T173948.json"}

func loadSaved(t *testing.T) []report.Result {
	t.Helper()
	var paths []string
	for _, f := range savedRuns {
		paths = append(paths, filepath.Join("testdata", f))
	}
	rs, err := report.LoadTrials(paths...)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// Runs saved on disk still load, every figure in its place: the name, the
// scenario's own figures, the handoffs at the resource and the judge at
// etcd.
func TestSavedRealPlaneRunsLoad(t *testing.T) {
	rs := loadSaved(t)
	if len(rs) != 8 {
		t.Fatalf("%d trials, want 8", len(rs))
	}
	r := rs[6]
	if r.ID != 58 || !strings.HasPrefix(r.Name, "real: whole leader master frozen") || r.Mode != "kha-fast-token" || r.Repeat != 1 {
		t.Errorf("which trial: %d %q %q %d", r.ID, r.Name, r.Mode, r.Repeat)
	}
	if r.Figures.Values["frozen_ms"] != 45589 || r.Figures.Values["stale_token"] != 1485 || len(r.Figures.Values) != 6 {
		t.Errorf("the scenario's own figures: %v", r.Figures.Values)
	}
	h := r.Handoff["kube-scheduler"]
	if h.LastOldMS == nil || *h.LastOldMS != 2175.184 || h.FirstOtherMS == nil || *h.FirstOtherMS != 9841.132 {
		t.Errorf("the scheduler's handoff: %v", h)
	}
	if r.SchedMS != 21914.226 || r.CMLeader != "m1" || r.HealAt.IsZero() || r.FaultDone.IsZero() || !r.Pass || r.Refused != 21 {
		t.Errorf("figures: %+v", r)
	}
	if !strings.HasPrefix(r.Etcd, "etcd revisions 43") || r.LateCommits != 0 {
		t.Errorf("the judge at etcd: %q, %d late", r.Etcd, r.LateCommits)
	}
	if rs[0].ID != 65 || rs[0].Figures.Values["freeze_ms"] != 1489 || rs[5].Mode != "kha-fast-gate" || len(rs[5].Problems) == 0 {
		t.Errorf("the first run: %+v / %+v", rs[0], rs[5])
	}
}

// From the saved runs the table, the picture and the soak lines come out
// byte for byte as testdata/saved.golden.txt holds them.
func TestSavedRealPlaneRunsGiveTheSameOutput(t *testing.T) {
	rs := loadSaved(t)
	var b bytes.Buffer
	WriteTable(&b, rs)
	for _, r := range rs {
		b.WriteString(SoakLine(r) + "\n")
	}
	if err := WriteSVG(&b, rs); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "saved.golden.txt")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Errorf("the output differs from %s (%d bytes, want %d): diff it with -update and git diff", golden, b.Len(), len(want))
	}
}
