package supervisor

import "testing"

func TestLifecycleTable(t *testing.T) {
	cases := []struct {
		from, to State
		want     bool
	}{
		{Starting, Standby, true},
		{Starting, Promoting, false}, // never campaign before registering
		{Standby, Promoting, true},
		{Standby, Active, false},  // the barrier and the start come first
		{Standby, Fencing, false}, // a standby holds nothing to fence
		{Promoting, Active, true},
		{Promoting, Fencing, true},
		{Promoting, Standby, false}, // a promotion is undone through demoting
		{Active, Demoting, true},
		{Active, Standby, false}, // units must be confirmed stopped first
		{Active, Fencing, true},
		{Demoting, Standby, true},
		{Demoting, Fencing, true},
		{Demoting, Active, false},
		{Fencing, Standby, false}, // a fencing process never comes back
		{Fencing, Promoting, false},
		{Stopped, Standby, false},
	}
	for _, c := range cases {
		if got := allowed(c.from, c.to); got != c.want {
			t.Errorf("allowed(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	// Terminal states have no way out.
	for _, s := range []State{Fencing, Stopped, Fenced, UnitsDown} {
		if len(lifecycle[s]) != 0 {
			t.Errorf("%s has outgoing edges %v", s, lifecycle[s])
		}
	}
}
