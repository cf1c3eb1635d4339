package probe

import (
	"testing"
	"time"
)

// A failover as the prober sees it: pods created before the instant and
// bound before it do not count; one waiting across it counts from its
// creation; the first bind after the instant is the service's return.
func TestFiguresFromTheInstant(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	s := Snapshot{
		Pods: []Pod{
			{Name: "before", Created: at(-1000), Bound: at(-900)},
			{Name: "across", Created: at(-200), Bound: at(6500)},
			{Name: "a", Created: at(200), Bound: at(6400)},
			{Name: "b", Created: at(400), Bound: at(6600)},
			{Name: "never", Created: at(9000)},
		},
		Deletions: []Deletion{
			{Pod: "rs-1", At: at(-3000), Replaced: at(-2900)},
			{Pod: "rs-2", At: at(1000), Replaced: at(7000)},
		},
	}
	f := s.Figures(t0, at(10000))
	if !f.Bound || f.FirstBind != 6400*time.Millisecond {
		t.Errorf("first bind %v (%v), want 6.4s", f.FirstBind, f.Bound)
	}
	if f.LongestUnbound != 6700*time.Millisecond {
		t.Errorf("longest unbound %v, want 6.7s (the pod waiting across the instant)", f.LongestUnbound)
	}
	if !f.Replaced || f.FirstReplaced != 7*time.Second || f.LongestUnreplaced != 6*time.Second {
		t.Errorf("replaced %v %v, longest %v; want 7s and 6s", f.FirstReplaced, f.Replaced, f.LongestUnreplaced)
	}
	if f := s.Figures(at(8000), at(10000)); f.Bound || f.LongestUnbound != time.Second {
		t.Errorf("after 8s: %+v, want nothing bound and the last pod waiting 1s", f)
	}
}
