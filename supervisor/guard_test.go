package supervisor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
)

// A node that holds the key but waits at the promotion barrier must not let
// an operator's `systemctl start` through: the guard says yes only once the
// promotion itself would start the units.
func TestGuardRefusesWhileHeldAtTheBarrier(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// A member that is gone from the election but whose record still says
	// its units may run holds every newcomer at the barrier.
	g, err := w.Admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(group.Record{Node: "m0", State: group.Fencing, UnitsRunning: true})
	cfg := supervisortest.FastConfig("m0")
	keys := group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster)
	if _, err := w.Admin.Put(ctx, keys.Member("m0"), string(rec), clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	m := w.Start("m1", nil)
	waitFor(t, "m1 to win and wait at the barrier", 20*time.Second, func() bool { return m.State() == group.Promoting })
	end := time.Now().Add(2 * time.Second)
	for time.Now().Before(end) {
		st := m.Sup.Status()
		if st.State != group.Promoting {
			t.Fatalf("m1 left the barrier (%s) while a record says units run", st.State)
		}
		if a := guard.Decide(units[1], guard.StatusOf(m.Sup.Term(), time.Now())); a.Allowed || st.UnitsAllowed {
			t.Fatalf("guard allowed a start at the barrier: %s (status %+v)", a.Message, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := w.Admin.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "m1 to become active", 20*time.Second, func() bool { return m.State() == group.Active })
	if a := guard.Decide(units[1], guard.StatusOf(m.Sup.Term(), time.Now())); !a.Allowed {
		t.Fatalf("guard refused on the active leader: %s", a.Message)
	}
}
