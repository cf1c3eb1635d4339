package scenario

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdload"
	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Scenario 35 (issue 11.7): the lab's etcd busy and under maintenance, as
// when the supervisor shares it with an apiserver: a database of a few
// hundred MB, a steady write load, then a defragmentation of each member in
// turn (each blocks its member), a snapshot, a compaction and a rolling
// restart of the three members. Nothing of it may move leadership or
// restart a unit.
const (
	busyPrefix    = "/busy-load/"
	busyFillKeys  = 220_000 // of busyValueSize: about 225 MB of live data
	busyValueSize = 1024
	busyRate      = 1000 // writes/s the load asks for
	busyWorkers   = 64   // enough that a member blocked by defrag does not starve the rest
	busySettle    = 5 * time.Second
)

func busyEtcd(ctx context.Context, r *Run) error {
	cli, err := r.Lab.Etcd.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	if err := r.busyPrefill(ctx, cli); err != nil {
		return err
	}
	pids := r.supervisorPIDs(ctx)
	before, err := r.scrapeRenewals(ctx, r.Leader)
	if err != nil {
		return err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	var load etcdload.Result
	var loadErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		load, loadErr = etcdload.Writer{Client: cli, Prefix: busyPrefix + "w/", Rate: busyRate, Size: busyValueSize,
			Workers: busyWorkers}.Run(lctx)
	})
	defer func() { stopLoad(); wg.Wait() }()
	if err := Sleep(ctx, busySettle); err != nil {
		return err
	}
	fault, _ := r.Fault("etcd maintenance under load: defrag of each member, snapshot, compaction, rolling restart", func() error { return nil })
	if err := r.busyMaintenance(ctx, cli); err != nil {
		return err
	}
	if err := Sleep(ctx, busySettle); err != nil {
		return err
	}
	end := time.Now()
	stopLoad()
	wg.Wait()
	if loadErr != nil {
		return loadErr
	}
	r.Metric("load_p50", load.P50)
	r.Metric("load_p99", load.P99)
	r.Notef("load from the observer host: %s (asked %d/s of %d B, %d workers)", load, busyRate, busyValueSize, busyWorkers)
	after, err := r.scrapeRenewals(ctx, r.Leader)
	if err != nil {
		return err
	}
	r.reportRenewals(before, after)
	r.reportFenceMargin(ctx, fault)
	r.NoChange(fault, end)
	if now := r.supervisorPIDs(ctx); fmt.Sprint(now) != fmt.Sprint(pids) {
		r.Failf("a supervisor restarted: main PIDs %v before, %v after", pids, now)
	}
	return nil
}

// busyPrefill writes busyFillKeys values (every run: on a lab that ran
// the scenario before, the rewrite leaves the old revisions in the
// database until the compaction, as an apiserver's churn does: the first
// run on a fresh lab defragments about 290 MB, later runs 650 MB to 1 GB)
// and notes the database size.
func (r *Run) busyPrefill(ctx context.Context, cli *clientv3.Client) error {
	pctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	start := time.Now()
	const parts = 4 // concurrent transactions
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for i := range parts {
		wg.Go(func() {
			errs[i] = etcdload.Prefill(pctx, cli, fmt.Sprintf("%sp%d/", busyPrefix, i), busyFillKeys/parts, busyValueSize)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	r.Metric("prefill", time.Since(start))
	r.Notef("prefilled %d values of %d B in %s", busyFillKeys, busyValueSize, time.Since(start).Round(time.Second))
	for _, m := range r.Lab.Etcd.Members {
		if st, err := cli.Status(pctx, r.Lab.Etcd.ClientURL(m)); err == nil {
			r.Notef("etcd %s database %d MB (in use %d MB)", m, st.DbSize>>20, st.DbSizeInUse>>20)
		}
	}
	return nil
}

// busyMaintenance runs the operations in turn, each timed.
func (r *Run) busyMaintenance(ctx context.Context, cli *clientv3.Client) error {
	for _, m := range r.Lab.Etcd.Members {
		if err := r.timed(ctx, "defrag_"+m, "defrag of etcd "+m+r.raftLeaderMark(ctx, m), func(ctx context.Context) error {
			mc, err := r.Lab.Etcd.Client(r.Lab.Etcd.ClientURL(m))
			if err != nil {
				return err
			}
			defer mc.Close()
			_, err = etcdload.Defragment(ctx, mc, r.Lab.Etcd.ClientURL(m))
			return err
		}); err != nil {
			return err
		}
	}
	if err := r.timed(ctx, "snapshot", "snapshot save", func(ctx context.Context) error {
		f, err := os.CreateTemp(r.Lab.OutDir(), "busy-snapshot-*.db")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		n, _, err := etcdload.Snapshot(ctx, cli, f)
		r.Notef("snapshot: %d MB", n>>20)
		return err
	}); err != nil {
		return err
	}
	if err := r.timed(ctx, "compact", "compaction", func(ctx context.Context) error {
		_, err := etcdload.Compact(ctx, cli, busyPrefix+"w/")
		return err
	}); err != nil {
		return err
	}
	for _, m := range r.Lab.Etcd.Members {
		if err := r.timed(ctx, "restart_"+m, "restart of etcd "+m+r.raftLeaderMark(ctx, m)+" (stop, start, healthy)", func(ctx context.Context) error {
			if err := r.Lab.Etcd.Stop(ctx, m); err != nil {
				return err
			}
			if err := r.Lab.Etcd.Start(m); err != nil {
				return err
			}
			return r.Lab.Etcd.WaitHealthy(ctx, r.Lab.Etcd.Members...)
		}); err != nil {
			return err
		}
	}
	return nil
}

// timed runs op with a generous bound, records its duration as metric and
// marks it on the timeline.
func (r *Run) timed(ctx context.Context, metric, what string, op func(context.Context) error) error {
	octx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	r.Mark(start, "", what)
	if err := op(octx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	r.Metric(metric, time.Since(start))
	r.Notef("%s: %s", what, time.Since(start).Round(time.Millisecond))
	return nil
}

// raftLeaderMark is " (raft leader)" when m leads etcd now: a defrag
// blocks its member, and every lease renewal goes through the leader.
func (r *Run) raftLeaderMark(ctx context.Context, m string) string {
	if l, err := r.etcdLeader(ctx); err == nil && l == m {
		return " (raft leader)"
	}
	return ""
}

// reportFenceMargin records the least time to the fence deadline the
// leader logged since fault (none failed: no figure; negative: past it): at
// the first failed renewal of a run ("renewal failed ... fence_in=", a
// warning), at the later ones (the same at debug level, or a warning every
// few seconds), and at the run's end ("renewals recovered" or "renewals
// never recovered" ... least_fence_in=). Runs are counted per lease.
func (r *Run) reportFenceMargin(ctx context.Context, fault time.Time) {
	var least time.Duration
	found, runs := false, 0
	for _, line := range strings.Split(r.JournalSince(ctx, r.Leader, lab.SupervisorUnit, fault), "\n") {
		_, rest, ok := strings.Cut(line, "fence_in=") // least_fence_in= too
		if !ok || !strings.Contains(line, "renewal failed") && !strings.Contains(line, "renewals recovered") && !strings.Contains(line, "renewals never recovered") {
			continue
		}
		d, err := time.ParseDuration(strings.Fields(rest + " ")[0])
		if err != nil {
			continue
		}
		if strings.Contains(line, "renewal failed") && slices.Contains(strings.Fields(line), "failed=1") {
			runs++
		}
		if !found || d < least {
			least, found = d, true
		}
	}
	if found {
		r.Metric("least_fence_in", least)
		r.Notef("%s logged %d run(s) of failed renewals (per lease); the least time left to its fence deadline was %s (TTL %s)", r.Leader, runs, least, r.Profile.TTL)
	}
}

// supervisorPIDs are both masters' kha-supervisor main PIDs.
func (r *Run) supervisorPIDs(ctx context.Context) map[string]int {
	out := map[string]int{}
	for _, n := range lab.MasterNames {
		out[n], _ = r.SupervisorPID(ctx, n)
	}
	return out
}

// reportRenewals records the leader's renewal latency per etcd member
// between two scrapes (p50/p99 estimated from the histogram's buckets) and
// the renewals that failed.
func (r *Run) reportRenewals(before, after renewScrape) {
	member := map[string]string{}
	for _, m := range r.Lab.Etcd.Members {
		member[r.Lab.Etcd.ClientURL(m)] = m
	}
	for _, lease := range []string{"election", "member"} {
		for ep, h := range after.Hist[lease] {
			d := h.since(before.Hist[lease][ep])
			if h.total() < before.Hist[lease][ep].total() {
				d = h // the supervisor restarted: its counts since then
				r.Notef("%s's supervisor restarted: %s renewals via %s counted since its restart", r.Leader, lease, ep)
			}
			name := member[ep]
			if name == "" {
				name = ep
			}
			r.Notef("%s's %s renewals answered first by %s: %d, p50 %s p99 %s", r.Leader, lease, name, d.total(),
				d.quantile(0.5).Round(100*time.Microsecond), d.quantile(0.99).Round(100*time.Microsecond))
			if lease == "election" && d.total() > 0 {
				r.Metric("renew_p50_"+name, d.quantile(0.5))
				r.Metric("renew_p99_"+name, d.quantile(0.99))
			}
		}
		// Not a failure of the scenario by itself: the fence clock
		// rides out a few, and a fence would show as a leadership change.
		f := after.Failures[lease] - before.Failures[lease]
		if f < 0 {
			f = after.Failures[lease]
		}
		if f > 0 {
			r.Notef("%s: %.0f %s renewal(s) failed through every member", r.Leader, f, lease)
		}
	}
}
