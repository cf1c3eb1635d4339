package commits

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// events parses the case's audit lines.
func events(t *testing.T, c Case) []audit.Event {
	t.Helper()
	evs, err := c.Events()
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// judge judges the case. The stand-ins' apiservers share an address
// (loopback): a write is attributed to the audit log it appears in.
func judge(t *testing.T, c Case) Report {
	t.Helper()
	return Judge(c.Recording, events(t, c), c.Options())
}

func loadCase(t *testing.T, name string) Case {
	t.Helper()
	c, err := LoadCase(filepath.Join("testdata", name+".json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Recording.Writes) == 0 {
		t.Fatalf("%s: an empty recording", name)
	}
	return c
}

const (
	schedUser = "system:kube-scheduler"
	rscUser   = "system:serviceaccount:kube-system:replicaset-controller"
	ns        = "probe"
)

func writeCase(t *testing.T, path string, c Case) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s: %d writes, audit lines %d+%d", path, len(c.Recording.Writes), len(c.Audit["m1"]), len(c.Audit["m2"]))
}

// byRole counts the report's commits per role and master.
func byRole(cs []Commit) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		out[c.Role+"@"+c.Master]++
	}
	return out
}

// checkClean: m1's term (token 1) then m2's (token 2), each a binding, a
// ReplicaSet pod and an event, all accepted, none late.
func checkClean(t *testing.T, rep Report) {
	t.Helper()
	want := map[string]int{audit.Scheduler + "@m1": 2, audit.Scheduler + "@m2": 2, audit.ControllerManager + "@m1": 1, audit.ControllerManager + "@m2": 1}
	if got := byRole(rep.Commits); !maps.Equal(got, want) {
		t.Errorf("commits by role and master %v, want %v", got, want)
	}
	for _, c := range rep.Commits {
		if want := map[string]int64{"m1": 1, "m2": 2}[c.Master]; c.Token != want {
			t.Errorf("%s: token %d, want %d", c, c.Token, want)
		}
	}
	if len(rep.Late) != 0 || len(rep.Ghosts) != 0 || !rep.OK() {
		t.Errorf("clean handoff judged %s: late %v, ghosts %v, problems %v", rep, rep.Late, rep.Ghosts, rep.Problems)
	}
}

// checkLate: m1's held create and binding committed after m2's first
// create and binding, both answered 201: two late commits, no ghost.
func checkLate(t *testing.T, rep Report) {
	t.Helper()
	if rep.OK() || len(rep.Late) != 2 {
		t.Fatalf("late commits %d (%v), want m1's held create and binding: %s", len(rep.Late), rep.Late, rep)
	}
	kinds := map[string]string{}
	for _, l := range rep.Late {
		if l.Master != "m1" || l.Next.Master != "m2" || l.Write.Rev <= l.Next.Write.Rev || l.Ghost() {
			t.Errorf("late commit %s", l)
		}
		kinds[l.Role] = l.Object.Kind
	}
	if want := map[string]string{audit.Scheduler: Binding, audit.ControllerManager: Create}; !maps.Equal(kinds, want) {
		t.Errorf("late commits by role %v, want %v", kinds, want)
	}
	if len(rep.Ghosts) != 0 {
		t.Errorf("ghosts %v, want none", rep.Ghosts)
	}
}

// checkGhost: m1's create committed while its answer was held: the audit
// log says 504, etcd holds the pod; committed before m2's first write.
func checkGhost(t *testing.T, rep Report) {
	t.Helper()
	if len(rep.Ghosts) != 1 {
		t.Fatalf("ghosts %d (%v), want m1's create answered 504: %s", len(rep.Ghosts), rep.Ghosts, rep)
	}
	g := rep.Ghosts[0]
	if g.Master != "m1" || g.Role != audit.ControllerManager || g.Object.Kind != Create || g.Request == nil || g.Request.Code != 504 {
		t.Errorf("ghost %s", g)
	}
	if len(rep.Late) != 0 || !rep.OK() {
		t.Errorf("late %v problems %v, want none", rep.Late, rep.Problems)
	}
}
