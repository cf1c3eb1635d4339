package config

import (
	"testing"
	"time"
)

// Stock etcd: heartbeat 100 ms, election timeout 1 s.
const stockElection = time.Second

// worstElectionGap is how long a leader may go without a successful
// renewal when the etcd raft leader stops just after the leader's last
// successful renewal was sent one renew interval before it (docs/configuration.md,
// "Profiles"): followers notice after their randomised election timeout (up
// to twice the configured one), the winner needs a pre-vote and a vote
// round and then commits its first entry, whose apply promotes its lessor
// (100 ms budget for all three on a LAN); then the next renewal is sent at
// most one renew interval later.
func worstElectionGap(renew time.Duration) time.Duration {
	return renew + 2*stockElection + 100*time.Millisecond + renew
}

// Every profile keeps its leader through an etcd leader election on stock
// etcd timing, with its own supervisor unit watchdog in the window.
func TestProfilesRideOutStockEtcdElection(t *testing.T) {
	for _, name := range ProfileNames() {
		p := Profiles[name]
		c := Default()
		c.Node = "m1"
		if err := c.UseProfile(name); err != nil {
			t.Fatal(err)
		}
		w := c.Window()
		w.Watchdog = p.Watchdog
		if err := w.Validate(c.Lease.RenewInterval); err != nil {
			t.Errorf("profile %s: refused under its own watchdog: %v", name, err)
		}
		span, gap := w.Span(w.TTL), worstElectionGap(c.Lease.RenewInterval)
		if span < gap {
			t.Errorf("profile %s: fence window %s (TTL %s, S_max %s, WatchdogSec %s) is shorter than the worst renewal gap across a stock etcd election, %s",
				name, span, w.TTL, w.StopMax, w.Watchdog, gap)
		} else {
			t.Logf("profile %s: fence window %s, worst gap %s, margin %s", name, span, gap, span-gap)
		}
	}
}
