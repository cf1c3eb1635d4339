package supervisor

import (
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// Whom a promotion fences at etcd: the previous holder unless it said its
// units are stopped; everyone else when the holder is unknown; never
// itself, never a master whose record says stopped.
func TestRevokeTargets(t *testing.T) {
	users := map[string]string{"m1": "u1", "m2": "u2", "m3": "u3"}
	stopped := group.Record{State: group.Standby}
	running := group.Record{State: group.Active, UnitsRunning: true}
	held := func(node string) holderMark { return holderMark{Node: node, Lease: clientv3.LeaseID(7), Token: 7} }
	for _, tc := range []struct {
		name string
		recs map[string]group.Record
		prev holderMark
		want []string
	}{
		{"previous holder gone", map[string]group.Record{"m3": stopped}, held("m1"), []string{"m1"}},
		{"previous holder says running", map[string]group.Record{"m1": running}, held("m1"), []string{"m1"}},
		{"previous holder says stopped (clean handover)", map[string]group.Record{"m1": stopped}, held("m1"), nil},
		{"a standby without a record is left alone", map[string]group.Record{"m1": stopped}, held("m1"), nil},
		{"own earlier incarnation", map[string]group.Record{}, held("m2"), nil},
		{"holder not in the table", map[string]group.Record{}, held("m9"), nil},
		{"no holder ever seen", map[string]group.Record{"m3": stopped}, holderMark{Unknown: true}, []string{"m1"}},
		{"nobody held the key", map[string]group.Record{}, holderMark{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := revokeTargets(users, "m2", tc.recs, tc.prev)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
