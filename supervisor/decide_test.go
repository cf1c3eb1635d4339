package supervisor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// The loop's timed decisions driven by an injected Clock, without etcd: a
// Supervisor built by New on a client that points nowhere and in-memory
// units, never Run; the handlers are called as the loop would. The
// real-etcd tests of the same behaviour stay (cooldown_test.go,
// supervisor_test.go).

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// newOffline is a Supervisor on a fake clock (at t0) and a client to no
// etcd; bg ends with the test, and with it any job a handler started.
func newOffline(t *testing.T, edit func(*config.Config)) (*Supervisor, *fakeClock, context.Context) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Node, cfg.Cluster = "m1", "test"
	cfg.Units.Managed = []string{"a.service", "b.service"}
	cfg.Etcd.RequestTimeout = 100 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	clk := &fakeClock{t: t0}
	s, err := New(Options{Config: cfg, Client: cli, Units: plainUnits{fencing.NewMemory()}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	s.loop.fenceTimer = time.NewTimer(time.Hour) // as Run makes it
	s.loop.fenceTimer.Stop()
	bg, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		for _, c := range s.loop.stopRenew {
			c()
		}
		_ = cli.Close()
	})
	return s, clk, bg
}

func unit(name, active, sub string, restarts uint32) fencing.UnitState {
	return fencing.UnitState{Name: name, ActiveState: active, SubState: sub, NRestarts: restarts}
}

// The failure window: failures older than the window drop out; the count
// is of those inside it, its start included.
func TestFailureWindow(t *testing.T) {
	s, _, _ := newOffline(t, func(c *config.Config) { c.Units.FailureWindow = time.Minute })
	cases := []struct {
		name     string
		failures []time.Duration // after t0
		now      time.Duration
		want     int
	}{
		{"none", nil, 0, 0},
		{"one just now", []time.Duration{0}, 0, 1},
		{"all inside", []time.Duration{0, 10 * time.Second, 50 * time.Second}, time.Minute, 3},
		{"the oldest at the window's edge counts", []time.Duration{0, 30 * time.Second}, time.Minute, 2},
		{"the oldest just outside", []time.Duration{0, 30 * time.Second}, time.Minute + time.Nanosecond, 1},
		{"all outside", []time.Duration{0, time.Second}, 2 * time.Minute, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.watch.failures = nil
			for _, d := range c.failures {
				s.watch.failures = append(s.watch.failures, t0.Add(d))
			}
			if got := s.recentFailures(t0.Add(c.now)); got != c.want {
				t.Fatalf("recentFailures = %d, want %d", got, c.want)
			}
			if len(s.watch.failures) != c.want {
				t.Fatalf("%d failures kept, want %d (older ones dropped)", len(s.watch.failures), c.want)
			}
		})
	}
}

// assessUnits on the leader: a unit down or restarted by systemd is a
// failure at the clock's time; the threshold within the window demotes
// with the configured cooldown from then.
func TestAssessUnitsCountsFailuresAndCoolsDown(t *testing.T) {
	s, clk, bg := newOffline(t, func(c *config.Config) {
		c.Units.FailureThreshold = 3
		c.Units.FailureWindow = time.Minute
		c.Units.Cooldown = 30 * time.Second
	})
	s.loop.state = group.Active
	steps := []struct {
		at     time.Duration
		units  []fencing.UnitState
		counts int
		state  group.State
	}{
		{0, []fencing.UnitState{unit("a.service", "active", "running", 0), unit("b.service", "active", "running", 0)}, 0, group.Active},
		{time.Second, []fencing.UnitState{unit("a.service", "failed", "failed", 0), unit("b.service", "active", "running", 0)}, 1, group.Active},
		{2 * time.Second, []fencing.UnitState{unit("a.service", "active", "running", 0), unit("b.service", "active", "running", 1)}, 2, group.Active},
		// The first failure is out of the window by now: still two.
		{61*time.Second + time.Millisecond, []fencing.UnitState{unit("a.service", "active", "running", 0), unit("b.service", "active", "running", 2)}, 2, group.Active},
		{62 * time.Second, []fencing.UnitState{unit("a.service", "failed", "failed", 0), unit("b.service", "active", "running", 2)}, 3, group.Demoting},
	}
	for i, st := range steps {
		clk.set(t0.Add(st.at))
		s.assessUnits(bg, unitObs{started: clk.Now(), states: st.units})
		if got := len(s.watch.failures); got != st.counts || s.loop.state != st.state {
			t.Fatalf("step %d: %d failures, state %s; want %d, %s", i, got, s.loop.state, st.counts, st.state)
		}
	}
	if want := t0.Add(62*time.Second + 30*time.Second); !s.loop.cooldown.Equal(want) {
		t.Fatalf("cooldown until %v, want %v (the demotion's time plus units.cooldown)", s.loop.cooldown, want)
	}
	if s.BadTransitions() != 0 {
		t.Fatalf("%d transitions not in the lifecycle table", s.BadTransitions())
	}
}

// The start-pre grace: a unit in ExecStartPre= (or its conditions) is left
// to the guard for startPreGrace from when the standby first saw it there;
// any other running unit is stopped at once; a unit seen stopped starts
// its grace afresh.
func TestStartPreGrace(t *testing.T) {
	s, _, _ := newOffline(t, nil)
	pre := []fencing.UnitState{unit("a.service", "activating", "start-pre", 0), unit("b.service", "inactive", "dead", 0)}
	cond := []fencing.UnitState{unit("a.service", "activating", "condition", 0), unit("b.service", "inactive", "dead", 0)}
	running := []fencing.UnitState{unit("a.service", "inactive", "dead", 0), unit("b.service", "active", "running", 0)}
	stopped := []fencing.UnitState{unit("a.service", "inactive", "dead", 0), unit("b.service", "inactive", "dead", 0)}
	steps := []struct {
		at    time.Duration
		units []fencing.UnitState
		want  []string
	}{
		{0, pre, nil},
		{startPreGrace - time.Millisecond, pre, nil},
		{startPreGrace, pre, []string{"a.service"}},
		{startPreGrace + time.Second, cond, []string{"a.service"}}, // still the same stay
		{startPreGrace + 2*time.Second, stopped, nil},
		{startPreGrace + 3*time.Second, pre, nil}, // a new stay, a new grace
		{2*startPreGrace + 3*time.Second - time.Millisecond, pre, nil},
		{2*startPreGrace + 3*time.Second, pre, []string{"a.service"}},
		{2*startPreGrace + 4*time.Second, running, []string{"b.service"}},
	}
	for i, st := range steps {
		s.watch.last = st.units
		got := s.enforceable(t0.Add(st.at))
		if len(got) != len(st.want) || (len(got) == 1 && got[0] != st.want[0]) {
			t.Fatalf("step %d (+%s): enforceable %v, want %v", i, st.at, got, st.want)
		}
	}
}

// The start-up retry waits a renew interval after a failure; a start-up
// that found its predecessor's records alive sits out the crash cooldown.
func TestStartupRetryAndCrashCooldown(t *testing.T) {
	s, clk, bg := newOffline(t, func(c *config.Config) {
		c.Lease.RenewInterval = time.Second
		c.Units.PollInterval = 500 * time.Millisecond
	})
	s.startupDone(bg, outcome[registration]{err: errors.New("etcd down")})
	if want := t0.Add(time.Second); !s.loop.retryAt.Equal(want) || s.loop.state != group.Starting {
		t.Fatalf("after a failed start-up: retry at %v in %s, want %v in starting", s.loop.retryAt, s.loop.state, want)
	}
	clk.set(t0.Add(time.Second - time.Millisecond))
	s.step(bg)
	if s.jobs.cur != nil {
		t.Fatalf("step started %s before the retry time", s.jobs.cur.kind.name)
	}
	clk.set(t0.Add(time.Second))
	s.step(bg)
	if s.jobs.cur == nil || s.jobs.cur.kind != jobStartup {
		t.Fatalf("step at the retry time started %v, want the start-up", s.jobs.cur)
	}
	s.jobs.cur.cancel()
	<-s.in.jobDone
	s.jobs.cur = nil

	at := t0.Add(time.Hour)
	clk.set(at)
	s.startupDone(bg, outcome[registration]{val: registration{lease: lease{id: 7, sent: deadlineNow(), ttl: 10 * time.Second}, crashed: true}})
	if want := at.Add(2*time.Second + 500*time.Millisecond); !s.loop.cooldown.Equal(want) || s.loop.state != group.Standby || s.loop.memberLease != 7 {
		t.Fatalf("after a crashed predecessor: cooldown %v, state %s, member lease %x; want %v, standby, 7", s.loop.cooldown, s.loop.state, s.loop.memberLease, want)
	}
	if !s.loop.since.Equal(at) {
		t.Fatalf("transition dated %v, want the clock's %v", s.loop.since, at)
	}
}

// A campaign in cooldown that nobody else could make overrides it, and
// says so once per cooldown however often it is asked.
func TestCooldownOverrideNotedOncePerCooldown(t *testing.T) {
	s, _, _ := newOffline(t, nil)
	s.loop.state = group.Standby
	s.watch.lastAt = t0
	s.dropins.store(dropinVerdict{checked: true})
	s.seen.members = map[string]group.Record{"m1": {Node: "m1", State: group.Standby}, "m2": {Node: "m2", State: group.Stopped}}
	s.loop.cooldown = t0.Add(time.Minute)
	for i := 0; i < 3; i++ {
		if !s.mayCampaign(t0.Add(time.Duration(i) * time.Second)) {
			t.Fatalf("ask %d: no campaign, want the override", i)
		}
	}
	if n := len(s.history.queue); n != 1 {
		t.Fatalf("%d history events, want one cooldown_override", n)
	}
	if e := <-s.history.queue; e.Kind != "cooldown_override" || !e.At.Equal(t0) {
		t.Fatalf("event %+v", e)
	}
	// Another member eligible: the cooldown holds.
	s.seen.members["m2"] = group.Record{Node: "m2", State: group.Standby}
	if s.mayCampaign(t0.Add(5 * time.Second)) {
		t.Fatal("campaigned in cooldown while another member is eligible")
	}
	if !s.mayCampaign(t0.Add(time.Minute)) {
		t.Fatal("no campaign once the cooldown is over")
	}
}

// The barrier's timing across looks: the blind wait starts when the
// previous holder's lease and record are first both gone, restarts if
// either is seen again, and a proof of its units being down cuts it short.
func TestBarrierTimeouts(t *testing.T) {
	s, _, _ := newOffline(t, func(c *config.Config) { c.Lease.TTL = 10 * time.Second })
	blind := s.blindWait()
	if want := time.Duration(float64(10*time.Second)*(1+s.window.ClockRate)) + etcdElectionAllowance; blind != want {
		t.Fatalf("blind wait %s, want %s", blind, want)
	}
	prev := holderMark{Node: "m2", Lease: 0x20, Token: 9, Seen: t0}
	alive := barrierView{Self: "m1", Prev: prev, PrevLeaseAlive: true}
	gone := barrierView{Self: "m1", Prev: prev}
	proof := barrierView{Self: "m1", Prev: prev, DownBy: t0.Add(10 * time.Second)}
	steps := []struct {
		at    time.Duration
		look  barrierView
		pass  bool
		until time.Duration // zero: not a timed wait
	}{
		{0, alive, false, 0},
		{time.Second, gone, false, time.Second + blind},
		{time.Second + blind - time.Millisecond, gone, false, time.Second + blind},
		{2 * time.Second, alive, false, 0}, // seen again: the wait restarts
		{3 * time.Second, gone, false, 3*time.Second + blind},
		{3*time.Second + blind, gone, true, 0},
	}
	var track barrierTrack
	for i, st := range steps {
		now := t0.Add(st.at)
		d := decideBarrier(now, track.fold(now, st.look), blind)
		var until time.Time
		if st.until != 0 {
			until = t0.Add(st.until)
		}
		if d.Pass != st.pass || !d.Until.Equal(until) {
			t.Fatalf("step %d (+%s): %+v, want pass %v until %v", i, st.at, d, st.pass, until)
		}
	}
	// A proof, once read, is kept and ends the wait at its instant.
	track = barrierTrack{}
	if d := decideBarrier(t0.Add(time.Second), track.fold(t0.Add(time.Second), proof), blind); d.Pass || !d.Until.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("with a proof: %+v, want a wait until the proof's instant", d)
	}
	if d := decideBarrier(t0.Add(10*time.Second), track.fold(t0.Add(10*time.Second), gone), blind); !d.Pass {
		t.Fatalf("at the proof's instant (proof not read again): %+v, want pass", d)
	}
}
