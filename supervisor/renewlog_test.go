package supervisor_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

var leases = []string{"election", "member"}

// A leader cut from etcd for a few renew intervals, short of its fence,
// logs one warning per lease for the run of failed renewals, not one per
// failure (eight lines a second under fast-kill: an alert on the warning
// rate fired on every flap of a link), and one line per lease when they
// recover that says how many failed and how close the fence came.
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
	leader.Cut(true)
	time.Sleep(3 * time.Second)
	leader.Cut(false)
	node := "node=" + leader.Name
	recovered := func() bool {
		for _, lease := range leases {
			if logs.count("INFO renewals recovered", node, "lease="+lease, "least_fence_in=") != 1 {
				return false
			}
		}
		return true
	}
	for end := time.Now().Add(10 * time.Second); !recovered() && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	if leader.State() != group.Active || others[0].State() != group.Standby {
		t.Fatalf("leadership moved: %s is %s, %s is %s", leader.Name, leader.State(), others[0].Name, others[0].State())
	}
	for _, lease := range leases {
		// Five or so per lease at one per 500 ms (the tap sees the debug
		// lines too); fewer than three would not tell one warning per run
		// from one per failure.
		failed := logs.count("renewal failed", node, "lease="+lease)
		if failed < 3 {
			t.Fatalf("only %d %s renewals failed in the 3 s cut: the test did not make a run of failures", failed, lease)
		}
		if warned := logs.count("WARN renewal failed", node, "lease="+lease); warned != 1 {
			t.Errorf("%d warnings for the %s lease's %d failed renewals, want 1", warned, lease, failed)
		}
	}
	if !recovered() {
		t.Errorf("not one line per lease that its renewals recovered, with the least time left to the fence")
	}
}

// A run of failed renewals that ends in a fence says so after the units are
// down, with how close the fence came (past it: negative), as a warning: its
// first failure's warning alone showed the most time left.
func TestRenewalOutageEndingInAFenceSaysSo(t *testing.T) {
	w := newWorld(t)
	logs := &logTap{}
	w.Options = func(_ string, o *supervisor.Options) { o.Log = slog.New(logs.tee(o.Log.Handler())) }
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, _ := leaderOf(t, a, b)
	waitFor(t, "the leader's units", 10*time.Second, func() bool { return leaderActive(leader) })
	leader.Cut(true)
	var fe *supervisor.FenceError
	if err := leader.WaitExit(t, 2*ttl+10*time.Second, "fence when cut off"); !errors.As(err, &fe) {
		t.Fatalf("the cut-off leader's Run returned %v, want a fence", err)
	}
	if n := logs.count("WARN renewals never recovered", "node="+leader.Name, "lease=election", "ended_by=fence", "least_fence_in="); n != 1 {
		t.Errorf("%d lines that the election lease's renewals never recovered before the fence, want 1", n)
	}
}
