package health

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// clock is the looked probe's time, moved by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time           { return c.t }
func (c *clock) add(d time.Duration)      { c.t = c.t.Add(d) }
func (c *clock) look(p *Probe, epoch int) { c.add(p.spec.Interval); p.look(epoch) }

// looked builds an armed-looking probe whose looks, results and time the
// test drives by hand: the decision alone, without the ticker.
func looked(stopped *bool, lookErr *error, grace time.Duration) (*Probe, *clock) {
	c, err := NewChecker("http://127.0.0.1:10259/healthz", TLS{}, time.Second)
	if err != nil {
		panic(err)
	}
	p := NewProbe(Spec{Unit: "kube-scheduler.service", Interval: 250 * time.Millisecond, Threshold: 3, Grace: grace,
		Stopped: func() (bool, error) {
			if *lookErr != nil {
				return false, *lookErr
			}
			return *stopped, nil
		}}, c)
	clk := &clock{t: time.Now()}
	p.now = clk.now
	p.cancel, p.epoch, p.armedAt = func() {}, 1, clk.t
	return p, clk
}

// Three looks in a row that find the unit stopped, with no answer between
// them, call it hung at once: one strike, marked Stopped, the state
// unhealthy; further looks add no strike. Two looks (a stop shorter than two
// intervals) are ridden out, and an answer starts the count again.
func TestStoppedUnitIsHungAtTheThirdLook(t *testing.T) {
	var stopped bool
	var lookErr error
	p, clk := looked(&stopped, &lookErr, 0)
	p.record(1, Result{At: clk.t, OK: true})

	stopped = true
	clk.look(p, 1)
	clk.look(p, 1)
	if n, _ := p.Take(); n != 0 || p.Report().State != StateHealthy {
		t.Fatalf("two looks stopped: %d strikes, state %s; want 0, healthy", n, p.Report().State)
	}
	p.record(1, Result{At: clk.t, OK: true}) // it answered: the stop was brief
	clk.look(p, 1)
	clk.look(p, 1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("an answer between the looks did not restart the count: %d strikes", n)
	}
	p.record(1, Result{At: clk.t, Code: 500, Error: "HTTP 500"}) // an unhealthy answer is an answer too
	clk.look(p, 1)
	clk.look(p, 1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("a 500 between the looks did not restart the count: %d strikes", n)
	}
	p.look(1) // a third look at once, behind a delayed tick: the looks span one interval, not two
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("three looks within one interval gave %d strikes: the stop must last two", n)
	}
	clk.look(p, 1)
	n, s := p.Take()
	if n != 1 || !s.Stopped || s.OK || !strings.Contains(s.Error, "stopped or frozen") {
		t.Fatalf("stopped for two intervals: %d strikes, %+v; want 1, Stopped", n, s)
	}
	if st := p.Report().State; st != StateUnhealthy {
		t.Fatalf("state %s after the verdict, want unhealthy", st)
	}
	clk.look(p, 1)
	clk.look(p, 1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("%d more strikes from later looks: the verdict counts once", n)
	}
	p.record(1, Result{At: clk.t, OK: true})
	if r := p.Report(); r.State != StateHealthy || r.HealthySince.IsZero() {
		t.Fatalf("answered again: %+v, want healthy", r)
	}

	// A look that fails between stopped ones restarts the count.
	clk.look(p, 1)
	clk.look(p, 1)
	lookErr = errors.New("cannot read")
	clk.look(p, 1)
	lookErr = nil
	clk.look(p, 1)
	clk.look(p, 1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("a failed look between stopped ones did not restart the count: %d strikes", n)
	}
}

// A look that fails (no control group to read) is not a stop: the probes'
// timeouts still decide, and the report says why the looks are blind. A
// unit within its grace is not called hung; one armed before a re-arm is
// forgotten.
func TestStoppedLooksFailingOrEarlyDecideNothing(t *testing.T) {
	stopped, lookErr := true, error(errors.New("no cgroup root to read"))
	p, clk := looked(&stopped, &lookErr, 0)
	for range 5 {
		clk.look(p, 1)
	}
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("failing looks gave %d strikes", n)
	}
	if r := p.Report(); r.StoppedLookError == "" || r.State == StateUnhealthy {
		t.Fatalf("report %+v: want the look's error and not unhealthy", r)
	}

	var noErr error
	q, qclk := looked(&stopped, &noErr, time.Hour)
	for range 5 {
		qclk.look(q, 1)
	}
	if n, _ := q.Take(); n != 0 {
		t.Fatalf("within the grace, before any answer: %d strikes", n)
	}
	q.look(0) // a look of an earlier arming
	if q.stopped != 5 {
		t.Fatalf("a stale look changed the count to %d", q.stopped)
	}
	qclk.add(time.Hour) // the grace is over and it is still stopped: hung at the next look
	qclk.look(q, 1)
	if n, s := q.Take(); n != 1 || !s.Stopped {
		t.Fatalf("stopped past the grace: %d strikes, %+v; want 1", n, s)
	}
}

// Armed for real against a server that stops answering while the oracle
// says stopped: the verdict comes from the looks, long before a probe's
// 30 s timeout could fail even one probe.
func TestStoppedVerdictComesBeforeAnyTimeout(t *testing.T) {
	s, ts, pool := tlsServer(t)
	c, err := NewChecker(ts.URL+"/healthz", TLS{Roots: pool}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	p := NewProbe(Spec{Unit: "u", Interval: 20 * time.Millisecond, Threshold: 3,
		Stopped: func() (bool, error) { return stopped.Load(), nil }}, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Arm(ctx)
	defer p.Disarm()
	waitFor(t, "healthy", func() bool { return p.Report().State == StateHealthy })
	s.hang.Store(true)
	stopped.Store(true)
	var n int
	var last Strike
	waitFor(t, "the stopped verdict", func() bool { n, last = p.Take(); return n > 0 })
	if !last.Stopped || p.Report().Failures != 0 {
		t.Fatalf("strike %+v with %d failed probes: want the looks' verdict and no probe failed yet", last, p.Report().Failures)
	}
}
