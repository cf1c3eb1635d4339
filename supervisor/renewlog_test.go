package supervisor_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// A leader cut from etcd for a few renew intervals, short of its fence,
// logs one warning per lease for the run of failed renewals, not one per
// failure (eight lines a second under fast-kill: an alert on the warning
// rate fired on every flap of a link), and one line when they recover that
// says how many failed and how close the fence came.
func TestRenewalOutageWarnsOncePerLeaseAndSaysWhenItEnds(t *testing.T) {
	w := newWorld(t)
	logs := &logTap{}
	w.Options = func(_ string, o *supervisor.Options) { o.Log = slog.New(logs.tee(o.Log.Handler())) }
	// A 10 s lease: the fence window (about 8 s) outlasts the cut by far.
	long := func(c *config.Config) { c.Lease.TTL = 10 * time.Second }
	a, b := w.Start("m1", long), w.Start("m2", long)
	leader, others := leaderOf(t, a, b)
	waitFor(t, "the leader's units", 10*time.Second, func() bool { return leaderActive(leader) })
	logs.reset()
	before := leader.RenewFailures.Load()
	leader.Cut(true)
	time.Sleep(3 * time.Second)
	leader.Cut(false)
	recovered := func() bool {
		return logs.count("INFO renewals recovered", "node="+leader.Name, "lease=election", "least_fence_in=") == 1
	}
	for end := time.Now().Add(10 * time.Second); !recovered() && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	if leader.State() != group.Active || others[0].State() != group.Standby {
		t.Fatalf("leadership moved: %s is %s, %s is %s", leader.Name, leader.State(), others[0].Name, others[0].State())
	}
	failed := leader.RenewFailures.Load() - before
	// Five or so per lease at one per 500 ms; fewer than three per lease
	// would not tell one warning per run from one per failure.
	if failed < 6 {
		t.Fatalf("only %d renewals failed in the 3 s cut: the test did not make a run of failures", failed)
	}
	for _, lease := range []string{"election", "member"} {
		warned := logs.count("WARN renewal failed", "node="+leader.Name, "lease="+lease)
		if warned != 1 {
			t.Errorf("%d warnings for the %s lease's failed renewals (%d failures in all), want 1", warned, lease, failed)
		}
	}
	if !recovered() {
		t.Errorf("no line that the election lease's renewals recovered, with the least time left to the fence")
	}
}
