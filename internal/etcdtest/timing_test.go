package etcdtest

import "testing"

// Options.Timing reaches the members: Stock is etcd's own 100 ms heartbeat
// and 1 s election timeout, the zero value the fast test timing.
func TestTimingOption(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timing   Timing
		tick, el uint
	}{
		{"zero is fast", Timing{}, TickMs, ElectionMs},
		{"stock", Stock, 100, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCluster(t, Options{Timing: tc.timing})
			cfg := c.Member(0).running().Config()
			if cfg.TickMs != tc.tick || cfg.ElectionMs != tc.el {
				t.Errorf("member runs heartbeat %d ms, election %d ms; want %d, %d", cfg.TickMs, cfg.ElectionMs, tc.tick, tc.el)
			}
		})
	}
}
