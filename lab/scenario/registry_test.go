package scenario

import (
	"slices"
	"testing"
)

// One registry for both planes: every ID names one scenario, a real-plane
// one is found by Lookup and RealSpec, a stand-in one by Lookup only, and
// every real-plane scenario can be run (a fault to inject) and named.
func TestOneRegistry(t *testing.T) {
	seen := map[int]string{}
	for _, s := range Tables() {
		if other, dup := seen[s.ID]; dup {
			t.Errorf("scenario %d is both %q and %q", s.ID, other, s.Name)
		}
		seen[s.ID] = s.Name
		if got, ok := Lookup(s.ID); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%d) = %q, %v", s.ID, got.Name, ok)
		}
		spec, real := RealSpec(s.ID)
		switch {
		case s.OnRealPlane() != real:
			t.Errorf("scenario %d: on the real plane %v, RealSpec found it %v", s.ID, s.OnRealPlane(), real)
		case real && (spec.ID != s.ID || spec.Inject == nil || spec.Fault == "" || s.Expected == ""):
			t.Errorf("real-plane scenario %d incomplete: %+v", s.ID, spec)
		case !real && s.run == nil:
			t.Errorf("stand-in scenario %d has no run", s.ID)
		}
	}
	if ids := RealIDs(); len(ids) < 20 || !slices.IsSorted(ids) || !slices.Contains(ids, 40) {
		t.Errorf("RealIDs() = %v: want the real plane's scenarios (40 among them), in order", ids)
	}
	// The stacked layout's scenarios are apart: `run real` on the default
	// lab must not draw them, `run stacked` only them.
	if ids := StackedIDs(); !slices.Equal(ids, []int{72, 73}) || slices.Contains(RealIDs(), 72) {
		t.Errorf("StackedIDs() = %v, RealIDs() = %v: want 72 and 73 in the first only", ids, RealIDs())
	}
}
