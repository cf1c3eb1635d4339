package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// These tests run real supervisors against a real three-member etcd
// cluster. Units are in memory (fencing.Memory records wall-clock start and
// stop instants); real systemd is tested in the fencing package and the lab.
// Each member reaches etcd through its own loopback proxies so a test can
// cut it off silently.

var units = []string{"kube-controller-manager.service", "kube-scheduler.service"}

// fastConfig is the "fast" profile: TTL 4 s, renew 0.5 s, stop 1 s + 0.5 s.
func fastConfig(node string) config.Config {
	c := config.Default()
	c.Node = node
	c.Cluster = "test"
	c.Etcd.RequestTimeout = config.D(400 * time.Millisecond)
	c.Lease.TTL = config.D(4 * time.Second)
	c.Lease.RenewInterval = config.D(500 * time.Millisecond)
	c.Units.Managed = units
	c.Units.StopTimeout = config.D(time.Second)
	c.Units.KillGrace = config.D(500 * time.Millisecond)
	c.Units.PollInterval = config.D(250 * time.Millisecond)
	c.Units.FailureThreshold = 3
	c.Units.FailureWindow = config.D(time.Minute)
	c.Units.Cooldown = config.D(30 * time.Second)
	return c
}

type member struct {
	name    string
	units   *fencing.Memory
	sup     *supervisor.Supervisor
	proxies []*tcpproxy.Proxy
	cancel  context.CancelFunc
	done    chan error
}

func (m *member) cut(v bool) {
	for _, p := range m.proxies {
		p.Blackhole(v)
	}
}

func (m *member) state() supervisor.State { return m.sup.Status().State }

type world struct {
	t       *testing.T
	cluster *etcdtest.Cluster
	admin   *clientv3.Client
}

func newWorld(t *testing.T) *world {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	return &world{t: t, cluster: c, admin: c.Client(t)}
}

func (w *world) start(name string, tweak func(*config.Config)) *member {
	t := w.t
	cfg := fastConfig(name)
	if tweak != nil {
		tweak(&cfg)
	}
	m := &member{name: name, units: fencing.NewMemory(), done: make(chan error, 1)}
	var eps []string
	for _, ep := range w.cluster.Endpoints() {
		p, err := tcpproxy.New(strings.TrimPrefix(ep, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		m.proxies = append(m.proxies, p)
		eps = append(eps, "http://"+p.Addr())
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: 2 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	log := slog.New(slog.NewTextHandler(testWriter{t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m.sup, err = supervisor.New(supervisor.Options{Config: cfg, Client: cli, Units: m.units, Log: log, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() { m.done <- m.sup.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s: Run did not return after cancel", name)
		}
	})
	return m
}

type testWriter struct {
	t    *testing.T
	name string
}

var logMu sync.Mutex

func (w testWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	if os.Getenv("KHA_TEST_LOG") != "" {
		w.t.Logf("%s", strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", within, what)
}

// leaderOf waits until exactly one of ms is active with all units running
// and returns it and the others.
func leaderOf(t *testing.T, ms ...*member) (*member, []*member) {
	t.Helper()
	var leader *member
	waitFor(t, "one active member with its units running", 30*time.Second, func() bool {
		leader = nil
		n := 0
		for _, m := range ms {
			if m.state() == supervisor.Active && m.units.Running(units[0]) && m.units.Running(units[1]) {
				leader = m
				n++
			}
		}
		return n == 1
	})
	var others []*member
	for _, m := range ms {
		if m != leader {
			others = append(others, m)
		}
	}
	return leader, others
}

// interval is one span during which a member ran a unit.
type interval struct {
	node       string
	start, end time.Time // end zero = still running
}

func intervals(m *member, unit string) []interval {
	var out []interval
	var cur *interval
	for _, e := range m.units.Snapshot() {
		if e.Unit != unit {
			continue
		}
		switch e.What {
		case "started":
			if cur == nil {
				cur = &interval{node: m.name, start: e.At}
			}
		case "stopped", "killed", "failed":
			if cur != nil {
				cur.end = e.At
				out = append(out, *cur)
				cur = nil
			}
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// assertNoOverlap checks that no two members ever ran the same unit at the
// same instant, and returns the smallest gap seen between one member's stop
// and another's start.
func assertNoOverlap(t *testing.T, ms ...*member) time.Duration {
	t.Helper()
	minGap := time.Duration(-1)
	for _, u := range units {
		var all []interval
		for _, m := range ms {
			all = append(all, intervals(m, u)...)
		}
		for i, a := range all {
			for _, b := range all[i+1:] {
				if a.node == b.node {
					continue
				}
				aEnd, bEnd := a.end, b.end
				if aEnd.IsZero() {
					aEnd = time.Now().Add(time.Hour)
				}
				if bEnd.IsZero() {
					bEnd = time.Now().Add(time.Hour)
				}
				if a.start.Before(bEnd) && b.start.Before(aEnd) {
					t.Fatalf("OVERLAP on %s: %s ran %s..%s and %s ran %s..%s", u,
						a.node, a.start.Format("15:04:05.000"), a.end.Format("15:04:05.000"),
						b.node, b.start.Format("15:04:05.000"), b.end.Format("15:04:05.000"))
				}
				gap := b.start.Sub(aEnd)
				if b.start.Before(a.start) {
					gap = a.start.Sub(bEnd)
				}
				if minGap < 0 || gap < minGap {
					minGap = gap
				}
			}
		}
	}
	return minGap
}

func lastStop(m *member) time.Time {
	var at time.Time
	for _, e := range m.units.Snapshot() {
		if e.What != "started" && e.At.After(at) {
			at = e.At
		}
	}
	return at
}

func firstStartAfter(m *member, after time.Time) time.Time {
	for _, e := range m.units.Snapshot() {
		if e.What == "started" && e.At.After(after) {
			return e.At
		}
	}
	return time.Time{}
}

func TestExactlyOneActive(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// Stay a while: the standby must stay standby, the leader active.
	time.Sleep(3 * time.Second)
	if leader.state() != supervisor.Active || others[0].state() != supervisor.Standby {
		t.Fatalf("after 3s: %s is %s, %s is %s", leader.name, leader.state(), others[0].name, others[0].state())
	}
	st := others[0].sup.Status()
	if st.Leader != leader.name || st.UnitsAllowed {
		t.Fatalf("standby status %+v: want leader %s and units not allowed", st, leader.name)
	}
	ls := leader.sup.Status()
	if !ls.UnitsAllowed || ls.Token == 0 || ls.LeaseLeft <= ls.StopMax {
		t.Fatalf("leader status %+v: want units allowed, a token and more lease than the stop budget", ls)
	}
	// The token is the election key's CreateRevision.
	resp, err := w.admin.Get(context.Background(), leader.sup.Keys().Leader())
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != ls.Token || string(resp.Kvs[0].Value) != leader.name {
		t.Fatalf("election key %v (err %v) does not match token %d of %s", resp, err, ls.Token, leader.name)
	}
	assertNoOverlap(t, a, b)
}

func TestSimultaneousStartOneLeader(t *testing.T) {
	w := newWorld(t)
	var ms []*member
	for i := 1; i <= 3; i++ {
		ms = append(ms, w.start(fmt.Sprintf("m%d", i), nil))
	}
	leaderOf(t, ms...)
	time.Sleep(time.Second)
	leaderOf(t, ms...)
	assertNoOverlap(t, ms...)
}

func TestGracefulStopHandsOver(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	next := others[0]
	stopAt := time.Now()
	leader.cancel()
	select {
	case err := <-leader.done:
		if err != nil {
			t.Fatalf("graceful stop returned %v", err)
		}
		leader.done <- nil // for Cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not stop")
	}
	if leader.units.Running(units[0]) || leader.units.Running(units[1]) {
		t.Fatal("units still running on the stopped leader")
	}
	leaderOf(t, next)
	started := firstStartAfter(next, stopAt)
	handoff := started.Sub(stopAt)
	t.Logf("handoff: SIGTERM-equivalent to new units started: %s (TTL %s)", handoff, 4*time.Second)
	// A release hands over at once; an expiry would take at least the TTL.
	if handoff >= 4*time.Second {
		t.Fatalf("handoff took %s: the lease expired instead of being released", handoff)
	}
	assertNoOverlap(t, a, b)
}

func TestPartitionedLeaderFencesBeforeTakeover(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	cutAt := time.Now()
	leader.cut(true)
	var err error
	select {
	case err = <-leader.done:
		leader.done <- err
	case <-time.After(20 * time.Second):
		t.Fatal("partitioned leader did not fence")
	}
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) || fe.Incomplete != nil {
		t.Fatalf("Run returned %v, want a complete FenceError", err)
	}
	leaderOf(t, others[0])
	stopped := lastStop(leader)
	started := firstStartAfter(others[0], cutAt)
	t.Logf("cut at 0; old units stopped at +%s; new units started at +%s; margin %s",
		stopped.Sub(cutAt).Round(time.Millisecond), started.Sub(cutAt).Round(time.Millisecond), started.Sub(stopped).Round(time.Millisecond))
	if !stopped.Before(started) {
		t.Fatalf("new units started at %s, before the old ones stopped at %s", started, stopped)
	}
	assertNoOverlap(t, a, b)
}

func TestRevokedLeaseFencesAndBarrierHolds(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// The old leader's scheduler ignores SIGTERM: its stop takes the whole
	// stop timeout and a SIGKILL. The new leader wins at once (the key is
	// gone) and must wait at the barrier for that.
	leader.units.SetStubborn(units[1], true)
	resp, err := w.admin.Get(context.Background(), leader.sup.Keys().Leader())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read election key: %v", err)
	}
	revokedAt := time.Now()
	if _, err := w.admin.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-leader.done:
		leader.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("leader did not fence after its lease was revoked")
	}
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want FenceError", err)
	}
	leaderOf(t, others[0])
	stopped := lastStop(leader)
	started := firstStartAfter(others[0], revokedAt)
	t.Logf("revoked at 0; old fenced (%s) with units down at +%s; new units at +%s",
		fe.Reason, stopped.Sub(revokedAt).Round(time.Millisecond), started.Sub(revokedAt).Round(time.Millisecond))
	if stopped.Sub(revokedAt) < time.Second {
		t.Fatalf("stubborn unit stopped after %s: the SIGKILL escalation did not wait for the stop timeout", stopped.Sub(revokedAt))
	}
	if !stopped.Before(started) {
		t.Fatal("barrier did not hold: new units started before the old ones stopped")
	}
	assertNoOverlap(t, a, b)
}

func TestQuorumLossFencesAndNobodyRuns(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	w.cluster.Member(0).Stop()
	w.cluster.Member(1).Stop()
	lostAt := time.Now()
	select {
	case err := <-leader.done:
		leader.done <- err
		var fe *supervisor.FenceError
		if !errors.As(err, &fe) {
			t.Fatalf("Run returned %v, want FenceError", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("leader did not fence after quorum loss")
	}
	// While quorum is lost nobody may run the units.
	time.Sleep(6 * time.Second)
	for _, m := range []*member{a, b} {
		if m.units.Running(units[0]) || m.units.Running(units[1]) {
			t.Fatalf("%s runs units without quorum", m.name)
		}
	}
	if err := w.cluster.Member(0).Restart(); err != nil {
		t.Fatal(err)
	}
	if err := w.cluster.Member(1).Restart(); err != nil {
		t.Fatal(err)
	}
	leaderOf(t, others[0])
	t.Logf("quorum lost at 0; old units stopped at +%s; new leader after restore at +%s",
		lastStop(leader).Sub(lostAt).Round(time.Millisecond), firstStartAfter(others[0], lostAt).Sub(lostAt).Round(time.Millisecond))
	assertNoOverlap(t, a, b)
}

func TestStandbyStopsUnitStartedBehindItsBack(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	standby.units.StartBehindBack(units[1])
	waitFor(t, "standby to stop the unit", 10*time.Second, func() bool { return !standby.units.Running(units[1]) })
	if leader.state() != supervisor.Active {
		t.Fatalf("leader is %s", leader.state())
	}
}

func TestCrashLoopingUnitDemotesLeader(t *testing.T) {
	w := newWorld(t)
	a, b := w.start("m1", nil), w.start("m2", nil)
	leader, others := leaderOf(t, a, b)
	// Crash the scheduler each time it comes back, as a crash-looping
	// service would.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if leader.units.Running(units[1]) {
				leader.units.Crash(units[1])
			}
		}
	}()
	waitFor(t, "the other member to take over", 30*time.Second, func() bool {
		return others[0].state() == supervisor.Active
	})
	st := leader.sup.Status()
	if st.State != supervisor.Standby || !st.CooldownUntil.After(time.Now()) {
		t.Fatalf("old leader %s, cooldown until %v: want standby in cooldown", st.State, st.CooldownUntil)
	}
	assertNoOverlap(t, a, b)
}
