package supervisor

import (
	"slices"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// Whom a promotion fences at etcd: every other master with a writer mark
// (it may have started units and not shown them down since) unless its
// record says its units are stopped; never itself, never a master without
// a mark.
func TestRevokeTargets(t *testing.T) {
	stopped := group.Record{State: group.Standby}
	running := group.Record{State: group.Active, UnitsRunning: true}
	for _, tc := range []struct {
		name  string
		marks []string
		recs  map[string]group.Record
		want  []string
	}{
		{"a holder cut off or paused (record lapsed)", []string{"m1"}, map[string]group.Record{"m3": stopped}, []string{"m1"}},
		{"a holder whose record says running", []string{"m1"}, map[string]group.Record{"m1": running}, []string{"m1"}},
		{"a holder that stopped its units and said so", []string{"m1"}, map[string]group.Record{"m1": stopped}, nil},
		{"a standby without a record and without a mark", nil, map[string]group.Record{}, nil},
		{"this node's own earlier term", []string{"m2"}, map[string]group.Record{}, nil},
		// Issue 22 review: A paused while active; B won but its promotion
		// failed before it revoked A; C, whose previous holder is B, must
		// still revoke A: A's mark outlives B's attempt.
		{"an older holder never revoked", []string{"m3", "m1"}, map[string]group.Record{"m1": stopped}, []string{"m3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := revokeTargets("m2", tc.marks, tc.recs)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
