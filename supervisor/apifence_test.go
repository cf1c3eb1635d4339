package supervisor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// recordingFence is an APIFence that records when it was asked and what ran
// at that moment. The real one (package apifence) is tested against real
// apiservers; here the subject is where the supervisor calls it.
type recordingFence struct {
	units fencing.Units
	fail  atomic.Bool

	mu        sync.Mutex
	published []int64
	runningAt [][]string // units running when Publish was called
	cuts      int
}

func (f *recordingFence) Publish(ctx context.Context, token int64) error {
	st, err := f.units.States(ctx, units)
	if err != nil {
		return err
	}
	var running []string
	for _, u := range st {
		if u.Running() {
			running = append(running, u.Name)
		}
	}
	f.mu.Lock()
	f.published = append(f.published, token)
	f.runningAt = append(f.runningAt, running)
	f.mu.Unlock()
	if f.fail.Load() {
		return errors.New("apiserver unreachable (test)")
	}
	return nil
}

func (f *recordingFence) Cut() {
	f.mu.Lock()
	f.cuts++
	f.mu.Unlock()
}

func (f *recordingFence) snapshot() ([]int64, [][]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.published...), append([][]string(nil), f.runningAt...), f.cuts
}

// TestAPIFencePublishBeforeUnitsAndFailureAbortsPromotion: the token is
// published after the barrier with no unit running, the units start only
// after; a Publish that fails keeps every unit down and hands the lease to
// the other member; demote and fence cut the API connections.
func TestAPIFencePublishBeforeUnitsAndFailureAbortsPromotion(t *testing.T) {
	w := newWorld(t)
	fences := map[string]*recordingFence{}
	var mu sync.Mutex
	w.Options = func(name string, o *supervisor.Options) {
		f := &recordingFence{units: o.Units}
		f.fail.Store(name == "m1")
		mu.Lock()
		fences[name] = f
		mu.Unlock()
		o.APIFence = f
	}
	a := w.Start("m1", nil)
	waitFor(t, "m1 tries to publish", 20*time.Second, func() bool { p, _, _ := fences["m1"].snapshot(); return len(p) > 0 })
	b := w.Start("m2", nil)
	leader, _ := leaderOf(t, a, b)
	if leader != b {
		t.Fatalf("leader is %s, want m2 (m1's publish fails)", leader.Name)
	}
	for _, ev := range a.Units.Snapshot() {
		if ev.What == "started" {
			t.Errorf("m1 started %s although its token could not be published", ev.Unit)
		}
	}
	pub, running, _ := fences["m2"].snapshot()
	if len(pub) == 0 || pub[len(pub)-1] != b.Sup.Status().Token {
		t.Errorf("m2 published %v, want its token %d last", pub, b.Sup.Status().Token)
	}
	for i, r := range running {
		if len(r) > 0 {
			t.Errorf("publish %d ran with units already running: %v", i, r)
		}
	}
	if st := b.Sup.Status(); st.APIFence != nil {
		t.Errorf("status shows an API fence the recorder does not report: %+v", st.APIFence)
	}
	// Partition the leader: it fences, and cuts first.
	b.Cut(true)
	if err := b.WaitExit(t, 20*time.Second, "fence when partitioned"); !errors.As(err, new(*supervisor.FenceError)) {
		t.Fatalf("m2 returned %v, want a FenceError", err)
	}
	if _, _, cuts := fences["m2"].snapshot(); cuts == 0 {
		t.Error("m2 fenced without cutting its API connections")
	}
}
