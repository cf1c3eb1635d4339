package supervisor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// A campaign is three requests (grant, transaction, re-read); on a slow
// link they use most of the fence window, which dates from the grant. The
// winner must renew at once, not one renew interval later.
func TestSlowCampaignDoesNotFenceTheWinner(t *testing.T) {
	w := newWorld(t)
	// Every request to etcd takes 600 ms (300 ms each way), under the 1 s
	// request timeout. Fence window: 5 s x 0.99 - 1.5 s - 0.5 s = 2.95 s.
	// The campaign ends about 1.8 s after the grant was sent; a renewal sent
	// then is answered at 2.4 s, one sent a renew interval later at 3.4 s.
	w.ProxyDelay = 300 * time.Millisecond
	m := w.Start("m1", func(c *config.Config) {
		c.Lease.TTL = 5 * time.Second
		c.Lease.RenewInterval = time.Second
		c.Etcd.RequestTimeout = time.Second
	})
	waitFor(t, "m1 to win", 20*time.Second, func() bool { return m.State() != group.Starting && m.State() != group.Standby })
	end := time.Now().Add(3 * 5 * time.Second) // three TTLs
	for time.Now().Before(end) {
		select {
		case err := <-m.Done:
			m.Done <- err
			t.Fatalf("the winner stopped after a slow campaign: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if st := m.State(); st != group.Active {
		t.Fatalf("m1 is %s after three TTLs, want active", st)
	}
}

// TestStandbyPastItsMemberLeaseRegistersBeforeItCampaigns (issue 21 item 5;
// lab 70, the standby frozen 15 s while the leader's rack was cut: in one
// trial in five the standby, thawed, won the free key on a member lease etcd
// had dropped during the freeze, failed the promotion at "publish record
// before starting units: no member lease", and the promotion failure's
// cooldown handed the group back to the old leader, 29.4 s after the fault
// instead of 18.3 s). Here etcd drops the standby's member lease (revoked,
// as it expires after a pause past its TTL) just as the leader releases the
// key: the standby must register again before it campaigns, and take over
// without a failed promotion. Before the fix: 27 promotions failed in a row
// ("write member record: etcdserver: requested lease not found"), or no
// takeover within three TTLs.
func TestStandbyPastItsMemberLeaseRegistersBeforeItCampaigns(t *testing.T) {
	w := newWorld(t)
	var (
		mu     sync.Mutex
		failed []string
	)
	w.Options = func(name string, o *supervisor.Options) {
		o.Observer = func(tr supervisor.Transition) {
			if tr.Kind == "promotion_failed" {
				mu.Lock()
				defer mu.Unlock()
				failed = append(failed, name+": "+tr.Reason)
			}
		}
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]

	// The standby's member lease is dropped by etcd (as after a pause
	// past its TTL) just as the leader releases the key.
	ctx := context.Background()
	rec, err := w.Admin.Get(ctx, standby.Sup.Keys().Member(standby.Name))
	if err != nil || len(rec.Kvs) != 1 || rec.Kvs[0].Lease == 0 {
		t.Fatalf("the standby's record: %v, %v", rec, err)
	}
	leader.Cancel() // a clean exit: units down, key released
	if _, err := w.Admin.Revoke(ctx, clientv3.LeaseID(rec.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := leader.WaitExit(t, 10*time.Second, "a clean exit"); err != nil {
		t.Fatalf("leader's Run returned %v", err)
	}
	waitFor(t, "the standby takes over", 3*ttl, func() bool {
		return standby.State() == group.Active && standby.Units.Running(units[0]) && standby.Units.Running(units[1])
	})
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		t.Fatalf("promotions failed on the way: %q", failed)
	}
}
