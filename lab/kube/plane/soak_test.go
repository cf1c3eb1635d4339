package plane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func TestSoakDrawsReplayFromTheSeed(t *testing.T) {
	o := SoakOptions{Seed: 7, Faults: []int{1, 2, 3, 4}, Second: []int{3, 9}}
	a, b := SoakDraws(o, 200), SoakDraws(o, 200)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed drew different faults")
	}
	o.Seed = 8
	if slices.Equal(a, SoakDraws(o, 200)) {
		t.Error("seeds 7 and 8 drew the same 200 faults")
	}
	if got := SoakDraws(SoakOptions{Seed: 7, Faults: o.Faults, Second: o.Second}, 10); !slices.Equal(got, a[:10]) {
		t.Error("the first 10 draws depend on how many are drawn")
	}
	overlaps := 0
	for _, d := range a {
		if !slices.Contains(o.Faults, d.First) {
			t.Errorf("first fault %d not in %v", d.First, o.Faults)
		}
		if d.Hold < 0 || d.Hold > 20*time.Second {
			t.Errorf("hold %s outside [0, 20 s]", d.Hold)
		}
		if d.Second == 0 {
			continue
		}
		overlaps++
		if d.Second == d.First || !slices.Contains(o.Second, d.Second) {
			t.Errorf("second fault %d on top of %d: want another of %v", d.Second, d.First, o.Second)
		}
		if d.Offset < 0 || d.Offset >= 3*time.Second {
			t.Errorf("offset %s outside [0, 3 s)", d.Offset)
		}
	}
	// One in five on average: 200 draws give 40, far from 0 or 200.
	if overlaps < 15 || overlaps > 70 {
		t.Errorf("%d overlaps in 200 draws, want about 40", overlaps)
	}
}

// No draw puts a second fault on a first that together leave etcd without a
// quorum (soakNoQuorum): seed 2401 drew 46 + 45 and held it to the bound.
func TestSoakNeverDrawsAQuorumLoss(t *testing.T) {
	pairs := 0
	for seed := uint64(1); seed <= 50; seed++ {
		for _, d := range SoakDraws(SoakOptions{Seed: seed}, 200) {
			if d.Second == 0 {
				continue
			}
			pairs++
			if soakNoQuorum[[2]int{d.First, d.Second}] {
				t.Fatalf("seed %d drew %d + %d: no etcd quorum left", seed, d.First, d.Second)
			}
		}
	}
	if pairs < 1000 {
		t.Errorf("%d pairs in 10000 draws, want about 2000", pairs)
	}
	if !soakNoQuorum[[2]int{46, 45}] || !soakNoQuorum[[2]int{46, 68}] {
		t.Error("the minority partition with the raft leader killed or stalled must be excluded")
	}
}

func TestSoakComposesTwoFaults(t *testing.T) {
	var log []string
	fault := func(id int) Spec {
		name := string(rune('a' + id - 900))
		return Spec{ID: id, Name: "real: " + name, Fault: name,
			Prepare: func(context.Context, *Trial) error { log = append(log, "prepare "+name); return nil },
			Inject: func(context.Context, *Trial) (func(context.Context) error, error) {
				log = append(log, "inject "+name)
				return func(context.Context) error { log = append(log, "heal "+name); return errors.New("heal " + name) }, nil
			},
			Judge: func(_ *Trial, _ []audit.Event, res *report.Result) { res.Notes = append(res.Notes, "judged "+name) }}
	}
	specs := map[int]Spec{900: fault(900), 901: fault(901)}
	lookup := func(id int) (Spec, bool) { s, ok := specs[id]; return s, ok }
	s := SoakDraw{First: 900, Second: 901, Offset: time.Millisecond, Hold: time.Millisecond}.spec(lookup)
	ctx := context.Background()
	if err := s.Prepare(ctx, nil); err != nil {
		t.Fatal(err)
	}
	heal, err := s.Inject(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctx, nil); err != nil {
		t.Fatal(err)
	}
	herr := heal(ctx)
	if herr == nil || !strings.Contains(herr.Error(), "heal a") || !strings.Contains(herr.Error(), "heal b") {
		t.Errorf("heal error %v: want both heals' errors", herr)
	}
	want := []string{"prepare a", "prepare b", "inject a", "inject b", "heal b", "heal a"}
	if !slices.Equal(log, want) {
		t.Errorf("order %v, want %v", log, want)
	}
	var res report.Result
	s.Judge(nil, nil, &res)
	if !slices.Equal(res.Notes, []string{"judged a", "judged b"}) {
		t.Errorf("judges %v, want both", res.Notes)
	}
	if s.ID != 900 || s.Name != "real: a + b" {
		t.Errorf("composed scenario %d %q", s.ID, s.Name)
	}
}

func TestCheckSoakRefuses(t *testing.T) {
	lookup := func(id int) (Spec, bool) { return Spec{ID: 902, Name: "real: x"}, id == 902 }
	if err := CheckSoak(SoakOptions{Faults: []int{12345}, Mode: Modes["kha-fast"], Lookup: lookup}); err == nil || !strings.Contains(err.Error(), "12345") {
		t.Errorf("an unknown fault: %v, want it named", err)
	}
	if err := CheckSoak(SoakOptions{Faults: []int{902}, Second: []int{902}, Mode: Modes["le-tuned"], Lookup: lookup}); err == nil || !strings.Contains(err.Error(), "le-tuned") {
		t.Errorf("a leader-election mode: %v, want it refused by name", err)
	}
	for _, o := range []SoakOptions{{}, {Duration: -time.Minute, Count: 3}, {Duration: time.Minute, Count: -1}} {
		o.Faults, o.Second, o.Mode, o.Lookup = []int{902}, []int{902}, Modes["kha-fast"], lookup
		if err := CheckSoak(o); err == nil || !strings.Contains(err.Error(), "count") {
			t.Errorf("duration %s, count %d: %v, want both limits named", o.Duration, o.Count, err)
		}
	}
	for _, o := range []SoakOptions{{Duration: time.Minute}, {Count: 3}, {Duration: time.Minute, Count: 3}} {
		o.Faults, o.Second, o.Mode, o.Lookup = []int{902}, []int{902}, Modes["kha-fast"], lookup
		if err := CheckSoak(o); err != nil {
			t.Errorf("a fitting soak (%s) refused: %v", o.limits(), err)
		}
	}
}

func TestSoakSummaryCountsWhatMustBeZero(t *testing.T) {
	rs := []report.Result{
		{Name: "real: cut", Repeat: 1, Pass: true, RealPlane: report.RealPlane{SchedMS: 6000, CMMS: 9000}},
		{Name: "real: cut", Repeat: 2, Pass: true, RealPlane: report.RealPlane{SchedMS: 8000, CMMS: 7000}},
		{Name: "real: freeze", Repeat: 3, Problems: nil, Pass: false, RealPlane: report.RealPlane{SchedMS: 5000, LateCommits: 2}}}
	var b strings.Builder
	SoakSummary(&b, 42, "kha-fast", rs, []string{"at the end: 2 kube-scheduler processes on m2, want 0 (a stray)"})
	s := b.String()
	for _, want := range []string{"seed 42", "3 faults, 2 passed", "late commits at etcd 2", "| cut | 2 | 2 | 7.00 s [6.00-8.00] | 8.00 s [7.00-9.00] | 0 | 0 |",
		"FAILED #3 real: freeze", "FAILED at the end: 2 kube-scheduler", "--seed 42"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

// The soaks docs/failure-modes.md quotes are committed: each still gives
// the counts the document states (faults, passed, and the zero counts of
// overlap, stale writes and late commits).
func TestSavedSoaksGiveTheQuotedCounts(t *testing.T) {
	for file, want := range map[string]string{
		"soak-20261203T103733-off-etcd-seed2301.json":   "Soak, seed 2301, mode kha-fast-etcd: 38 faults, 38 passed; overlap intervals 0, stale writes accepted 0, late commits at etcd 0, ghost writes 16",
		"soak-20261203T161157-token-etcd-seed2401.json": "Soak, seed 2401, mode kha-fast-token-etcd: 87 faults, 85 passed; overlap intervals 0, stale writes accepted 0, late commits at etcd 0, ghost writes 13",
		"soak-20261203T185441-off-etcd-seed2402.json":   "Soak, seed 2402, mode kha-fast-etcd: 99 faults, 99 passed; overlap intervals 0, stale writes accepted 0, late commits at etcd 0, ghost writes 24",
	} {
		rs, err := report.LoadTrials(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		var seed uint64
		if _, err := fmt.Sscanf(file[strings.LastIndex(file, "seed")+4:], "%d.json", &seed); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var b strings.Builder
		SoakSummary(&b, seed, rs[0].Mode, rs, nil)
		if got, _, _ := strings.Cut(b.String(), "\n"); got != want {
			t.Errorf("%s:\n got %s\nwant %s", file, got, want)
		}
	}
}
