package supervisor_test

import (
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
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
