package supervisor

import (
	"testing"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// TestTermOpen: only a promoting or active member with a token and an open
// start gate, whose promotion allowed starts, publishes an open term;
// fencing and demoting members never do.
func TestTermOpen(t *testing.T) {
	for _, tc := range []struct {
		name       string
		state      group.State
		token      int64
		gateClosed bool
		starts     bool
		want       bool
	}{
		{"active", group.Active, 9, false, true, true},
		{"promoting past the barrier", group.Promoting, 9, false, true, true},
		{"before the barrier", group.Promoting, 9, false, false, false},
		{"fencing", group.Fencing, 9, false, true, false},
		{"demoting", group.Demoting, 9, false, true, false},
		{"gate closed", group.Active, 9, true, true, false},
		{"no token", group.Active, 0, false, true, false},
		{"standby", group.Standby, 0, false, false, false},
	} {
		var v termView
		v.allowStarts(tc.starts)
		v.publish(fencing.Term{State: string(tc.state), Token: tc.token, Open: termOpen(tc.state, tc.token, tc.gateClosed)})
		if got := v.load().Open; got != tc.want {
			t.Errorf("%s: Open = %v, want %v", tc.name, got, tc.want)
		}
		// The promotion's word reaches readers without the loop.
		v.allowStarts(!tc.starts)
		if got := v.load().Open; got != (termOpen(tc.state, tc.token, tc.gateClosed) && !tc.starts) {
			t.Errorf("%s: Open = %v after allowStarts(%v)", tc.name, got, !tc.starts)
		}
	}
	var v termView
	if v.load() != (fencing.Term{}) {
		t.Fatal("an unpublished term is not the zero (closed) Term")
	}
}
