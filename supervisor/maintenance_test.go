package supervisor_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdload"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// In production the supervisor shares etcd with the apiserver, whose
// traffic and maintenance must not move leadership: under a steady write
// load, a defragmentation of each member in turn (it blocks the member for
// its duration), a snapshot, a compaction and a rolling restart of the
// three members, the leader keeps its lease and no unit is restarted.
func TestLeaderSurvivesEtcdMaintenanceUnderLoad(t *testing.T) {
	for _, name := range []string{"default", "fast"} {
		t.Run(name, func(t *testing.T) { survivesMaintenance(t, name) })
	}
}

// survivesMaintenance runs the shipped profile name, under its own
// watchdog, against an etcd with stock timing (100 ms / 1 s).
func survivesMaintenance(t *testing.T, name string) {
	w := supervisortest.NewWorldWith(t, etcdtest.Options{Members: 3, Timing: etcdtest.Stock})
	w.Options = func(_ string, o *supervisor.Options) { o.Watchdog = config.Profiles[name].Watchdog }
	profile := func(c *config.Config) {
		if err := c.UseProfile(name); err != nil {
			t.Fatal(err)
		}
	}
	a, b := w.Start("m1", profile), w.Start("m2", profile)
	leader, others := leaderOf(t, a, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := etcdload.Prefill(ctx, w.Admin, "/load/", 20000, 1024); err != nil {
		t.Fatal(err)
	}
	loadDone := make(chan etcdload.Result, 1)
	go func() {
		r, err := etcdload.Writer{Client: w.Admin, Prefix: "/load/w/", Rate: 1000, Size: 1024}.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		loadDone <- r
	}()
	startsBefore := starts(leader.Units)

	maint := make(chan error, 1)
	go func() { maint <- maintenance(t, w, ctx) }()
	for done := false; !done; {
		select {
		case err := <-maint:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case err := <-leader.Done:
			leader.Done <- err
			t.Fatalf("leader stopped during etcd maintenance: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		if leader.State() != group.Active || others[0].State() != group.Standby {
			t.Fatalf("leadership moved during etcd maintenance: %s is %s, %s is %s", leader.Name, leader.State(), others[0].Name, others[0].State())
		}
	}
	cancel()
	t.Logf("load: %s", <-loadDone)
	if n := starts(leader.Units) - startsBefore; n != 0 {
		t.Fatalf("%d unit start(s) during etcd maintenance", n)
	}
	t.Logf("renewal failures: leader %d, standby %d", leader.RenewFailures.Load(), others[0].RenewFailures.Load())
	assertNoOverlap(t, a, b)
}

// maintenance runs what operators do to a busy etcd, one after the other,
// and logs how long each took.
func maintenance(t *testing.T, w *supervisortest.World, ctx context.Context) error {
	c := w.Cluster
	for i := range c.Size() {
		d, err := etcdload.Defragment(ctx, w.Admin, c.Member(i).Endpoint())
		if err != nil {
			return err
		}
		t.Logf("defragment %s: %s", c.Member(i).Name(), d.Round(time.Millisecond))
	}
	n, d, err := etcdload.Snapshot(ctx, w.Admin, io.Discard)
	if err != nil {
		return err
	}
	t.Logf("snapshot: %d bytes in %s", n, d.Round(time.Millisecond))
	if d, err = etcdload.Compact(ctx, w.Admin, "/load/"); err != nil {
		return err
	}
	t.Logf("compact: %s", d.Round(time.Millisecond))
	for i := range c.Size() {
		m := c.Member(i)
		start := time.Now()
		m.Stop()
		if err := m.Restart(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.WaitLeader(wctx)
		cancel()
		if err != nil {
			return err
		}
		t.Logf("restart %s: %s", m.Name(), time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func starts(m *fencing.Memory) int {
	n := 0
	for _, e := range m.Snapshot() {
		if e.What == "started" {
			n++
		}
	}
	return n
}
