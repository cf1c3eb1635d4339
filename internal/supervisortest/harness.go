// Package supervisortest runs real supervisors in one process against a
// real etcd cluster (embed), with in-memory units that record wall-clock
// start and stop instants, and checks that no two members ever ran a unit
// at once. Each member reaches etcd through its own loopback proxies so a
// test can cut it off silently.
package supervisortest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// These tests run real supervisors against a real three-member etcd
// cluster. Units are in memory (fencing.Memory records wall-clock start and
// stop instants); real systemd is tested in the fencing package and the lab.
// Each member reaches etcd through its own loopback proxies so a test can
// cut it off silently.

// Units are the managed units every member runs.
var Units = []string{"kube-controller-manager.service", "kube-scheduler.service"}

// FastConfig is a short test timing: TTL 4 s, renew 0.5 s, stop 1 s + 0.5 s
// (the shipped "fast" profile's numbers before its TTL became 6 s; see
// config.Profiles). It suits the fast etcd timing of etcdtest's default;
// a test about the shipped profile uses config.Profiles, as
// TestFastProfileSurvivesEtcdLeaderLoss does.
func FastConfig(node string) config.Config {
	c := config.Default()
	c.Node = node
	c.Cluster = "test"
	c.Etcd.RequestTimeout = 400 * time.Millisecond
	c.Lease.TTL = 4 * time.Second
	c.Lease.RenewInterval = 500 * time.Millisecond
	c.Units.Managed = Units
	c.Units.StopTimeout = time.Second
	c.Units.KillGrace = 500 * time.Millisecond
	c.Units.PollInterval = 250 * time.Millisecond
	c.Units.FailureThreshold = 3
	c.Units.FailureWindow = time.Minute
	c.Units.Cooldown = 30 * time.Second
	return c
}

type Member struct {
	Name    string
	Units   *fencing.Memory
	Sup     *supervisor.Supervisor
	Proxies []*tcpproxy.Proxy
	Cancel  context.CancelFunc
	Done    chan error
	// RenewFailures counts failed lease renewals (both leases).
	RenewFailures atomic.Int64
}

func (m *Member) Cut(v bool) {
	for _, p := range m.Proxies {
		p.Blackhole(v)
	}
}

// Kill ends m as kill -9 would, as far as etcd and the units can tell: its
// traffic is cut off for good (nothing it sends arrives, so nothing is
// released), then its Run is stopped; the stop brings its in-memory units
// down at once, as BindsTo= does for the real ones. Its run state stays.
func (m *Member) Kill() {
	m.Cut(true)
	m.Cancel()
}

// StateDir is the run-state directory of the node name: a member started
// again under the same name finds what its predecessor left.
func (w *World) StateDir(name string) string { return filepath.Join(w.stateDir, name) }

func (m *Member) State() group.State { return m.Sup.Status().State }

type World struct {
	t       testing.TB
	Cluster *etcdtest.Cluster
	Admin   *clientv3.Client
	// Options, when set, adjusts each member's supervisor options before
	// it starts (for example a Notify that misbehaves).
	Options func(name string, o *supervisor.Options)
	// ProxyDelay, when set, slows every member started from then on: each
	// chunk through its proxies arrives this much later, both ways.
	ProxyDelay time.Duration
	// Username and Password, when set, are the etcd credentials of every
	// member started from then on (a cluster with auth enabled).
	Username, Password string

	stateDir string // one run-state directory per node name, kept across restarts
}

func NewWorld(t testing.TB, members int) *World {
	return NewWorldWith(t, etcdtest.Options{Members: members})
}

// NewWorldWith is NewWorld on a cluster started with opts (for example
// etcdtest.Stock timing).
func NewWorldWith(t testing.TB, opts etcdtest.Options) *World {
	c := etcdtest.NewCluster(t, opts)
	return &World{t: t, Cluster: c, Admin: c.Client(t), stateDir: runDir(t)}
}

// runDir is a run-state directory on tmpfs where the machine has one, as
// the daemon's /run/kha-supervisor is: the state is fsynced on the way out
// of a fence, and on the disk of a loaded CI machine that took half a
// second the fence tests then counted against the exit (CI of d103a99:
// Run returned 2.0 s after the fence instant, S_max 1.5 s).
func runDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "kha-runstate-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func (w *World) Start(name string, tweak func(*config.Config)) *Member {
	t := w.t
	cfg := FastConfig(name)
	if tweak != nil {
		tweak(&cfg)
	}
	m := &Member{Name: name, Units: fencing.NewMemory(), Done: make(chan error, 1)}
	var eps []string
	for _, ep := range w.Cluster.Endpoints() {
		p, err := tcpproxy.New(strings.TrimPrefix(ep, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.SetDelay(w.ProxyDelay)
		m.Proxies = append(m.Proxies, p)
		eps = append(eps, "http://"+p.Addr())
	}
	dial := func(eps ...string) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: eps, DialTimeout: 2 * time.Second, Username: w.Username, Password: w.Password,
			DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: time.Second,
			Logger: zap.NewNop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	cli := dial(eps...)
	var renew []*clientv3.Client
	for _, ep := range eps {
		renew = append(renew, dial(ep))
	}
	log := slog.New(slog.NewTextHandler(testWriter{t, name}, &slog.HandlerOptions{Level: logLevel()}))
	pool, err := etcdconn.NewPool(renew, etcdconn.PoolOptions{HedgeAfter: etcdconn.HedgeDelay(cfg.Etcd), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithTimeout(context.Background(), 5*time.Second)
	err = pool.Verify(vctx)
	vcancel()
	if err != nil {
		t.Fatal(err)
	}
	opts := supervisor.Options{Config: cfg, Client: cli, Pool: pool, Units: m.Units, Log: log, Version: "test",
		RunStateDir: w.StateDir(name),
		RenewObserver: func(_, _ string, _ time.Duration, err error) {
			if err != nil {
				m.RenewFailures.Add(1)
			}
		}}
	if w.Options != nil {
		w.Options(name, &opts)
	}
	m.Sup, err = supervisor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.Cancel = cancel
	go func() { m.Done <- m.Sup.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-m.Done:
		case <-time.After(15 * time.Second):
			t.Errorf("%s: Run did not return after cancel", name)
		}
		if n := m.Sup.BadTransitions(); n != 0 {
			t.Errorf("%s took %d transition(s) not in the lifecycle table (see its log)", name, n)
		}
	})
	return m
}

type testWriter struct {
	t    testing.TB
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

func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
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
func LeaderOf(t testing.TB, ms ...*Member) (*Member, []*Member) {
	t.Helper()
	var leader *Member
	WaitFor(t, "one active member with its units running", 30*time.Second, func() bool {
		leader = nil
		n := 0
		for _, m := range ms {
			if m.State() == group.Active && m.Units.Running(Units[0]) && m.Units.Running(Units[1]) {
				leader = m
				n++
			}
		}
		return n == 1
	})
	var others []*Member
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

func intervals(m *Member, unit string) []interval {
	var out []interval
	var cur *interval
	for _, e := range m.Units.Snapshot() {
		if e.Unit != unit {
			continue
		}
		switch e.What {
		case "started":
			if cur == nil {
				cur = &interval{node: m.Name, start: e.At}
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
func AssertNoOverlap(t testing.TB, ms ...*Member) time.Duration {
	t.Helper()
	minGap := time.Duration(-1)
	for _, u := range Units {
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

func LastStop(m *Member) time.Time {
	var at time.Time
	for _, e := range m.Units.Snapshot() {
		if e.What != "started" && e.At.After(at) {
			at = e.At
		}
	}
	return at
}

func FirstStartAfter(m *Member, after time.Time) time.Time {
	for _, e := range m.Units.Snapshot() {
		if e.What == "started" && e.At.After(after) {
			return e.At
		}
	}
	return time.Time{}
}

// ConfigFile writes a configuration file for the command-line tools that
// points at the cluster directly (not through a member's proxies), with the
// same cluster name and timings as the members, and returns its path.
func (w *World) ConfigFile(node string) string {
	var eps []string
	for _, ep := range w.Cluster.Endpoints() {
		eps = append(eps, fmt.Sprintf("%q", ep))
	}
	body := fmt.Sprintf(`node = %q
cluster = "test"
[etcd]
endpoints = [%s]
request_timeout = "400ms"
[lease]
ttl = "4s"
renew_interval = "500ms"
[units]
managed = [%q, %q]
stop_timeout = "1s"
kill_grace = "500ms"
poll_interval = "250ms"
`, node, strings.Join(eps, ", "), Units[0], Units[1])
	path := filepath.Join(w.t.TempDir(), node+".toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		w.t.Fatal(err)
	}
	return path
}

// WaitExit waits until m's Run returned and gives its result (it stays
// readable for the cleanup). It fails t if that takes longer than within.
func (m *Member) WaitExit(t *testing.T, within time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-m.Done:
		m.Done <- err
		return err
	case <-time.After(within):
		t.Fatalf("%s: %s did not %s within %s", t.Name(), m.Name, what, within)
		return nil
	}
}

// StaysLeader checks for d that leader stays active and standby standby,
// and that leader's Run does not return; check, if set, runs every 100 ms.
func StaysLeader(t *testing.T, leader, standby *Member, d time.Duration, why string, check func()) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		select {
		case err := <-leader.Done:
			leader.Done <- err
			t.Fatalf("leader stopped %s: %v", why, err)
		case <-time.After(100 * time.Millisecond):
		}
		if leader.State() != group.Active || standby.State() != group.Standby {
			t.Fatalf("leadership moved %s: %s is %s, %s is %s", why, leader.Name, leader.State(), standby.Name, standby.State())
		}
		if check != nil {
			check()
		}
	}
}

// logLevel is info, or debug when KHA_TEST_LOG=debug.
func logLevel() slog.Level {
	if os.Getenv("KHA_TEST_LOG") == "debug" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
