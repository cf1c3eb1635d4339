package plane

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/commits"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// recorded judges one of the etcd judge's stored recordings
// (lab/kube/commits/testdata) as a trial does and returns the result.
func recorded(t *testing.T, name string, mode Mode) report.Result {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "commits", "testdata", name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Recording commits.Recording   `json:"recording"`
		Audit     map[string][]string `json:"audit"`
	}
	if err := json.NewDecoder(zr).Decode(&c); err != nil {
		t.Fatal(err)
	}
	var evs []audit.Event
	for m, lines := range c.Audit {
		e, err := audit.Parse(strings.NewReader(strings.Join(lines, "\n")+"\n"), m)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, e...)
	}
	res := report.Result{Mode: mode.Name}
	applyCommits(&res, commits.Judge(c.Recording, evs, commits.Options{}))
	verdict(&res, mode)
	return res
}

// A trial of a kha mode passes only with zero late commits at etcd: the
// recorded late commits fail it, whatever the audit judge said (its
// figures are zero here), and are listed; a ghost write is reported and
// does not fail it.
func TestTrialFailsOnALateCommit(t *testing.T) {
	for _, mode := range []Mode{KhaMode(lab.Fast), FencedMode(lab.Fast, FenceToken)} {
		late := recorded(t, "late", mode)
		if late.Pass || late.LateCommits != 2 || len(late.LateList) != 2 || !late.LabFailure() {
			t.Errorf("%s, late recording: pass %v, late %d %v, lab failure %v", mode.Name, late.Pass, late.LateCommits, late.LateList, late.LabFailure())
		}
		clean := recorded(t, "clean", mode)
		if !clean.Pass || clean.LateCommits != 0 || !strings.Contains(clean.Etcd, "late commits 0") {
			t.Errorf("%s, clean recording: pass %v, %s", mode.Name, clean.Pass, clean.Etcd)
		}
		ghost := recorded(t, "ghost", mode)
		if !ghost.Pass || ghost.GhostWrites != 1 || len(ghost.GhostList) != 1 {
			t.Errorf("%s, ghost recording: pass %v, ghosts %d %v", mode.Name, ghost.Pass, ghost.GhostWrites, ghost.GhostList)
		}
	}
}

// Leader election fences nothing: its late commits are the comparison's
// finding, not a failure of the lab.
func TestLeaderElectionLateCommitIsAFinding(t *testing.T) {
	res := recorded(t, "late", Modes["le-tuned"])
	if res.Pass || res.Finding == "" || res.LabFailure() {
		t.Errorf("le-tuned, late recording: pass %v, finding %q, lab failure %v", res.Pass, res.Finding, res.LabFailure())
	}
}

// A recording the judge could not read fails the trial (a problem), as
// the audit judge's unreadable log does.
func TestTrialFailsWhenEtcdIsNotRead(t *testing.T) {
	res := report.Result{}
	applyCommits(&res, commits.Report{Problems: []string{"revision 7: undecodable"}})
	verdict(&res, KhaMode(lab.Fast))
	if res.Pass || len(res.Problems) != 1 {
		t.Errorf("pass %v problems %v", res.Pass, res.Problems)
	}
}
