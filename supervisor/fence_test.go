package supervisor_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// fenceClock records when a member entered Fencing and when it last pinged
// the watchdog.
type fenceClock struct {
	mu       sync.Mutex
	fencedAt time.Time
	pings    []time.Time
}

func (c *fenceClock) observe(tr supervisor.Transition) {
	if tr.To == group.Fencing {
		c.mu.Lock()
		c.fencedAt = tr.At
		c.mu.Unlock()
	}
}

func (c *fenceClock) notify(msg string) {
	if msg == "WATCHDOG=1" {
		c.mu.Lock()
		c.pings = append(c.pings, time.Now())
		c.mu.Unlock()
	}
}

func (c *fenceClock) fenced() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.fencedAt }

func (c *fenceClock) lastPing() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pings) == 0 {
		return time.Time{}
	}
	return c.pings[len(c.pings)-1]
}

// TestFenceKillsUnitsWhenTheServiceManagerHangs: the leader is cut off from
// etcd while its service manager answers nothing (PID 1 or its bus hung). The
// units must be down within S_max of the fence instant all the same: killed
// from their cgroups (here the in-memory stand-in for that), confirmed, and
// the process gone without waiting on the manager.
func TestFenceKillsUnitsWhenTheServiceManagerHangs(t *testing.T) {
	w := newWorld(t)
	clk := &fenceClock{}
	w.Options = func(name string, o *supervisor.Options) { o.Observer = clk.observe; o.Notify = clk.notify }
	a := w.Start("m1", nil)
	leaderOf(t, a)
	stopMax := a.Sup.Status().StopMax

	a.Units.SetHung(true)
	a.Cut(true)
	err := a.WaitExit(t, 30*time.Second, "fence")
	exited := time.Now()
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want a FenceError", err)
	}
	fencedAt := clk.fenced()
	down := supervisortestLastStop(a)
	t.Logf("fence at %s; units down %s after it, Run returned %s after it (S_max %s); incomplete: %v",
		fencedAt.Format("15:04:05.000"), down.Sub(fencedAt).Round(time.Millisecond), exited.Sub(fencedAt).Round(time.Millisecond), stopMax, fe.Incomplete)
	for _, u := range units {
		if a.Units.Running(u) {
			t.Fatalf("%s still runs after the fence (manager hung)", u)
		}
	}
	if fe.Incomplete != nil {
		t.Fatalf("fence reported incomplete although the units were killed directly: %v", fe.Incomplete)
	}
	// Generous for a loaded machine, but well under the old path's
	// S_max + 1 s + S_max spent waiting on the manager.
	if got := down.Sub(fencedAt); got > stopMax+300*time.Millisecond {
		t.Fatalf("units down %s after the fence instant, over S_max %s", got, stopMax)
	}
	if a.Units.DirectKills() == 0 {
		t.Fatal("no direct kill was used although the manager was hung")
	}
}

// TestFenceThatCannotConfirmStopsPinging: when not even the direct kill
// can be confirmed, the process must stop feeding the watchdog at S_max and
// exit at once (exit 4), so that systemd's BindsTo= takes over.
func TestFenceThatCannotConfirmStopsPinging(t *testing.T) {
	w := newWorld(t)
	clk := &fenceClock{}
	w.Options = func(name string, o *supervisor.Options) { o.Observer = clk.observe; o.Notify = clk.notify }
	a := w.Start("m1", nil)
	leaderOf(t, a)
	stopMax := a.Sup.Status().StopMax

	a.Units.SetHung(true)
	a.Units.SetDirectFails(true)
	a.Cut(true)
	err := a.WaitExit(t, 30*time.Second, "fence")
	exited := time.Now()
	var fe *supervisor.FenceError
	if !errors.As(err, &fe) || fe.Incomplete == nil {
		t.Fatalf("Run returned %v, want an incomplete FenceError", err)
	}
	fencedAt, last := clk.fenced(), clk.lastPing()
	t.Logf("fence at %s; last watchdog ping %s after it, Run returned %s after it (S_max %s)",
		fencedAt.Format("15:04:05.000"), last.Sub(fencedAt).Round(time.Millisecond), exited.Sub(fencedAt).Round(time.Millisecond), stopMax)
	if got := last.Sub(fencedAt); got > stopMax {
		t.Fatalf("watchdog pinged %s after the fence instant, beyond S_max %s, while the manager hung", got, stopMax)
	}
	if got := exited.Sub(fencedAt); got > stopMax+500*time.Millisecond {
		t.Fatalf("Run returned %s after the fence instant; want an exit right after S_max %s", got, stopMax)
	}
}

func supervisortestLastStop(m *member) time.Time { return lastStop(m) }

// TestFenceResetsTheConnectionsToEtcdOnceTheUnitsAreDown: a fenced leader
// destroys the node's connections to etcd (etcd.reset_on_fence), after its
// units are confirmed down (the apiserver's requests for them are then
// cancelled, and what they had already queued for etcd is what the reset
// discards) and before its record says so (the next leader may be let in
// early from then on).
func TestFenceResetsTheConnectionsToEtcdOnceTheUnitsAreDown(t *testing.T) {
	w := newWorld(t)
	type call struct {
		running []string
		state   group.State
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	var a *supervisortest.Member
	w.Options = func(name string, o *supervisor.Options) {
		o.ResetConnections = func() (int, error) {
			mu.Lock()
			defer mu.Unlock()
			c := call{state: a.State()}
			for _, u := range units {
				if a.Units.Running(u) {
					c.running = append(c.running, u)
				}
			}
			calls = append(calls, c)
			return 3, nil
		}
	}
	a = w.Start("m1", nil)
	leaderOf(t, a)
	mu.Lock()
	if len(calls) != 0 {
		t.Fatalf("connections reset %d times before any fence", len(calls))
	}
	mu.Unlock()
	a.Cut(true)
	var fe *supervisor.FenceError
	if err := a.WaitExit(t, 30*time.Second, "fence"); !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want a FenceError", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 {
		t.Fatalf("connections reset %d times by one fence, want once", len(calls))
	}
	if c := calls[0]; len(c.running) != 0 || c.state != group.Fencing {
		t.Fatalf("reset while %v still ran, in state %s: want the units down, still fencing", c.running, c.state)
	}
}

// pingsBefore is every ping sent before t.
func (c *fenceClock) pingsBefore(t time.Time) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Time
	for _, p := range c.pings {
		if p.Before(t) {
			out = append(out, p)
		}
	}
	return out
}

// TestBackstopPingsStopBeforeTheFenceInstant: under fast-kill the watchdog
// is the backstop (fencing.Window.Backstop). A leader cut off from etcd
// keeps its units past the fence instant t_s + TTL*(1-rho) - S_max -
// max(delta, W + A) (2.91 s, A = 250 ms for systemd's lateness) up to t_s +
// 3.21 s, and keeps the promise every watchdog ping makes: none leaves after
// t_s + TTL*(1-rho) - S_max - W - A (2.91 s), so that had it frozen after
// its last ping, systemd's kill (W, and up to A, later) and the units' stop
// (S_max) would still land before the lease could lapse. Once its units are down it pings again, through the
// epilogue.
func TestBackstopPingsStopBeforeTheFenceInstant(t *testing.T) {
	const watchdog = 500 * time.Millisecond
	w := newWorld(t)
	clk := &fenceClock{}
	w.Options = func(name string, o *supervisor.Options) {
		o.Observer, o.Notify, o.Watchdog = clk.observe, clk.notify, watchdog
	}
	var cfg config.Config
	a := w.Start("m1", func(c *config.Config) {
		if err := c.UseProfile("fast-kill"); err != nil {
			t.Fatal(err)
		}
		cfg = *c
	})
	leaderOf(t, a)
	win := cfg.Window()
	win.Watchdog = watchdog
	if !win.Backstopped() {
		t.Fatalf("fast-kill window %+v: the watchdog is not the backstop", win)
	}
	span, pingSpan := win.Span(win.TTL), win.PingSpan(win.TTL)
	time.Sleep(time.Second) // steady renewals and pings

	cut := time.Now()
	a.Cut(true)
	var fe *supervisor.FenceError
	if err := a.WaitExit(t, 30*time.Second, "fence"); !errors.As(err, &fe) {
		t.Fatalf("Run returned %v, want a FenceError", err)
	}
	fencedAt := clk.fenced()
	before := clk.pingsBefore(fencedAt)
	if len(before) == 0 {
		t.Fatal("no watchdog ping before the fence")
	}
	last := before[len(before)-1]
	after := len(clk.pingsBefore(time.Now().Add(time.Hour))) - len(before)
	t.Logf("cut at 0; last ping %s, fence %s (window %s, pings for %s after t_s); %d pings after the fence began",
		last.Sub(cut).Round(time.Millisecond), fencedAt.Sub(cut).Round(time.Millisecond), span, pingSpan, after)

	// t_s, the last renewal's send time, lies within a renew interval (and
	// 100 ms for a late renewal) before the cut, so the fence instant lies
	// in (cut + span - renew - 100 ms, cut + span]. The old margin fenced
	// 300 ms earlier.
	early := cut.Add(span - cfg.Lease.RenewInterval - 100*time.Millisecond)
	if fencedAt.Before(early) || fencedAt.After(cut.Add(span+200*time.Millisecond)) {
		t.Errorf("fence %s after the cut; want within (%s, %s]", fencedAt.Sub(cut), early.Sub(cut), span+200*time.Millisecond)
	}
	// The pings stop W - delta (300 ms) before the fence instant; a tick
	// (100 ms) may separate the last one from that instant.
	if gap, want := fencedAt.Sub(last), span-pingSpan; gap < want-20*time.Millisecond {
		t.Errorf("last ping %s before the fence instant; want at least %s: a ping after t_s + %s promises a kill after the lease could lapse", gap, want, pingSpan)
	}
	if after == 0 {
		t.Error("no ping after the fence began: the epilogue, with the units down, must feed the watchdog")
	}
	for _, u := range units {
		if a.Units.Running(u) {
			t.Fatalf("%s still runs after the fence", u)
		}
	}
}
