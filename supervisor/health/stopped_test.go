package health

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// looked builds an armed-looking probe whose looks and results the test
// drives by hand: the decision alone, without the ticker.
func looked(stopped *atomic.Bool, lookErr *atomic.Value, grace time.Duration) *Probe {
	c, err := NewChecker("http://127.0.0.1:10259/healthz", TLS{}, time.Second)
	if err != nil {
		panic(err)
	}
	p := NewProbe(Spec{Unit: "kube-scheduler.service", Interval: 250 * time.Millisecond, Threshold: 3, Grace: grace,
		Stopped: func() (bool, error) {
			if e, _ := lookErr.Load().(error); e != nil {
				return false, e
			}
			return stopped.Load(), nil
		}}, c)
	p.cancel, p.epoch, p.armedAt = func() {}, 1, time.Now()
	return p
}

// Three looks in a row that find the unit stopped, with no answer between
// them, call it hung at once: one strike, marked Stopped, the state
// unhealthy; further looks add no strike. Two looks (a stop shorter than two
// intervals) are ridden out, and an answer starts the count again.
func TestStoppedUnitIsHungAtTheThirdLook(t *testing.T) {
	var stopped atomic.Bool
	var lookErr atomic.Value
	p := looked(&stopped, &lookErr, 0)
	p.record(1, Result{At: time.Now(), OK: true})

	stopped.Store(true)
	p.look(1)
	p.look(1)
	if n, _ := p.Take(); n != 0 || p.Report().State != StateHealthy {
		t.Fatalf("two looks stopped: %d strikes, state %s; want 0, healthy", n, p.Report().State)
	}
	p.record(1, Result{At: time.Now(), OK: true}) // it answered: the stop was brief
	p.look(1)
	p.look(1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("an answer between the looks did not restart the count: %d strikes", n)
	}
	p.look(1)
	n, s := p.Take()
	if n != 1 || !s.Stopped || s.OK || !strings.Contains(s.Error, "stopped or frozen") {
		t.Fatalf("third look stopped: %d strikes, %+v; want 1, Stopped", n, s)
	}
	if st := p.Report().State; st != StateUnhealthy {
		t.Fatalf("state %s after the verdict, want unhealthy", st)
	}
	p.look(1)
	p.look(1)
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("%d more strikes from later looks: the verdict counts once", n)
	}
	p.record(1, Result{At: time.Now(), OK: true})
	if r := p.Report(); r.State != StateHealthy || r.HealthySince.IsZero() {
		t.Fatalf("answered again: %+v, want healthy", r)
	}
}

// A look that fails (no control group to read) is not a stop: the probes'
// timeouts still decide, and the report says why the looks are blind. A
// unit within its grace is not called hung; one armed before a re-arm is
// forgotten.
func TestStoppedLooksFailingOrEarlyDecideNothing(t *testing.T) {
	var stopped atomic.Bool
	var lookErr atomic.Value
	stopped.Store(true)
	lookErr.Store(errors.New("no cgroup root to read"))
	p := looked(&stopped, &lookErr, 0)
	for range 5 {
		p.look(1)
	}
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("failing looks gave %d strikes", n)
	}
	if r := p.Report(); r.StoppedLookError == "" || r.State == StateUnhealthy {
		t.Fatalf("report %+v: want the look's error and not unhealthy", r)
	}

	var noErr atomic.Value
	q := looked(&stopped, &noErr, time.Hour)
	for range 5 {
		q.look(1)
	}
	if n, _ := q.Take(); n != 0 {
		t.Fatalf("within the grace, before any answer: %d strikes", n)
	}
	q.look(0) // a look of an earlier arming
	if q.stopped != 5 {
		t.Fatalf("a stale look changed the count to %d", q.stopped)
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
