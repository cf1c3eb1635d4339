package health

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Spec is one unit's probe, as the configuration gives it.
type Spec struct {
	Unit      string
	Interval  time.Duration // between the starts of two probes
	Threshold int           // consecutive failures that make the unit unhealthy
	// Grace: after the probe is armed (the unit seen running on the
	// leader), failures do not count until one probe succeeded or Grace
	// passed, because a component answers /healthz only some seconds after
	// its start.
	Grace time.Duration
	// Stopped, when set, says whether the unit's processes are all stopped
	// (SIGSTOP, a debugger) or frozen (fencing.StopReader). A unit seen so
	// at stoppedLooks looks in a row, one per Interval, with no probe
	// answered meanwhile, is hung without waiting for the probes' timeouts:
	// such a process cannot answer, however long it is given.
	Stopped func() (bool, error)
}

// stoppedLooks is how many looks in a row (an Interval apart) must find the
// unit stopped: a stop shorter than two intervals (0.5 s under the fast
// profiles, 4 s under the default) is ridden out, as a debugger's brief
// look at the process should be; a longer one costs a restart.
const stoppedLooks = 3

// States of a probe, as Report shows them.
const (
	StateOff       = "off"       // not probing: not the leader, or the unit does not run
	StateStarting  = "starting"  // armed, within its grace, no success yet
	StateHealthy   = "healthy"   // fewer than Threshold consecutive failures
	StateUnhealthy = "unhealthy" // Threshold consecutive failures or more
)

// Report is what status and metrics show of one probe.
type Report struct {
	Unit        string  `json:"unit"`
	URL         string  `json:"url"`
	State       string  `json:"state"`
	Consecutive int     `json:"consecutive_failures"`
	Threshold   int     `json:"threshold"`
	Probes      int64   `json:"probes"`   // since this process started
	Failures    int64   `json:"failures"` // failed probes since this process started
	Last        *Result `json:"last,omitempty"`
	// HealthySince is when the probe last went from not healthy to
	// healthy while armed (zero if it has not since it was armed).
	HealthySince time.Time `json:"healthy_since,omitzero"`
	// StoppedLookError: the last look at whether the unit's processes are
	// stopped failed (no control group to read, say); the probes' timeouts
	// still find a hang, only later.
	StoppedLookError string `json:"stopped_look_error,omitempty"`
}

// Probe probes one unit while armed. Its methods are safe for concurrent
// use: the supervisor's loop arms, disarms and takes; status reads.
type Probe struct {
	spec  Spec
	check *Checker
	now   func() time.Time

	mu           sync.Mutex
	cancel       context.CancelFunc // nil when disarmed
	epoch        int                // bumped by every arm and disarm; results of an older epoch are dropped
	armedAt      time.Time
	started      bool // a probe succeeded since arming
	consecutive  int
	strikes      int    // failures at or past the threshold not yet taken
	strike       Strike // the latest of them
	probes, bad  int64
	last         *Result
	healthySince time.Time
	stopped      int       // looks in a row that found the unit stopped, since the last answer
	stoppedAt    time.Time // the first of them
	hung         bool      // called hung from the looks; cleared by an answer or a re-arm
	lookErr      string    // the last look's error, "" once a look succeeds
}

// NewProbe returns a disarmed probe.
func NewProbe(spec Spec, check *Checker) *Probe {
	return &Probe{spec: spec, check: check, now: time.Now}
}

// Unit names the probed unit.
func (p *Probe) Unit() string { return p.spec.Unit }

// Arm starts probing (from now, with a fresh grace), unless armed already.
// The probing ends with Disarm or with ctx.
func (p *Probe) Arm(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.epoch++
	p.armedAt, p.started, p.consecutive, p.strikes, p.last, p.healthySince = p.now(), false, 0, 0, nil, time.Time{}
	p.stopped, p.hung, p.lookErr = 0, false, ""
	go p.run(ctx, p.epoch)
}

// Disarm stops probing and forgets the failures not yet taken.
func (p *Probe) Disarm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel == nil {
		return
	}
	p.cancel()
	p.cancel = nil
	p.epoch++
	p.consecutive, p.strikes = 0, 0
	p.stopped, p.hung, p.lookErr = 0, false, ""
}

// Rearm restarts the grace: the unit's process was replaced.
func (p *Probe) Rearm(ctx context.Context) {
	p.Disarm()
	p.Arm(ctx)
}

// Strike is a failed probe that counts against the unit: its result and
// how many had failed in a row with it. Stopped: the unit was called hung
// because its processes were stopped or frozen (Spec.Stopped), before
// InARow failures reached the threshold; Result.Error says for how long.
type Strike struct {
	Result
	InARow  int
	Stopped bool
}

// Take returns how many failed probes counted against the unit since the
// last Take: each failure once the unit is unhealthy (the one that reached
// the threshold, and every further one), with the latest of them (a later
// success does not undo them: each was a real failure).
func (p *Probe) Take() (int, Strike) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, s := p.strikes, p.strike
	p.strikes = 0
	return n, s
}

// Report returns the probe's current view.
func (p *Probe) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Report{Unit: p.spec.Unit, URL: p.check.URL(), State: p.stateLocked(), Consecutive: p.consecutive,
		Threshold: p.spec.Threshold, Probes: p.probes, Failures: p.bad, HealthySince: p.healthySince,
		StoppedLookError: p.lookErr}
	if p.last != nil {
		l := *p.last
		r.Last = &l
	}
	return r
}

func (p *Probe) stateLocked() string {
	switch {
	case p.cancel == nil:
		return StateOff
	case p.consecutive >= p.spec.Threshold || p.hung:
		return StateUnhealthy
	case !p.started && p.last != nil && !p.last.OK || !p.started && p.last == nil:
		return StateStarting
	default:
		return StateHealthy
	}
}

// run starts a probe every Interval, without waiting for the one in flight
// (a probe's timeout may be longer than the interval): a hung unit is then
// found after timeout + (Threshold-1) x Interval of silence, not Threshold
// x timeout, and a slow but live unit still gets the whole timeout to
// answer. At most maxInFlight wait at once; past that the next start waits
// for one to end.
func (p *Probe) run(ctx context.Context, epoch int) {
	t := time.NewTicker(p.spec.Interval)
	defer t.Stop()
	slots := make(chan struct{}, maxInFlight(p.check.Timeout(), p.spec.Interval))
	for {
		select {
		case <-ctx.Done():
			return
		case slots <- struct{}{}:
		}
		go func() {
			defer func() { <-slots }()
			r := p.check.Check(ctx)
			if ctx.Err() != nil {
				return // disarmed mid-probe: its failure says nothing
			}
			p.record(epoch, r)
		}()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.look(epoch)
	}
}

// look asks Spec.Stopped once, and calls the unit hung when it has found
// it stopped stoppedLooks times in a row with no probe answered since the
// first. A look that fails counts as not stopped: the probes' own timeouts
// still find the hang.
func (p *Probe) look(epoch int) {
	if p.spec.Stopped == nil {
		return
	}
	stopped, err := p.spec.Stopped()
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch {
		return
	}
	p.lookErr = ""
	if err != nil {
		p.lookErr = err.Error()
	}
	if err != nil || !stopped {
		p.stopped = 0
		return
	}
	if p.stopped == 0 {
		p.stoppedAt = now
	}
	p.stopped++
	// Looks, and the time they span: a tick delayed behind a slow look
	// comes at once after it, and three looks must still cover two
	// intervals (less a quarter for the ticks' own jitter).
	if p.stopped < stoppedLooks || now.Sub(p.stoppedAt) < time.Duration(stoppedLooks-1)*p.spec.Interval-p.spec.Interval/4 || p.hung {
		return
	}
	if !p.started && now.Sub(p.armedAt) < p.spec.Grace {
		return // still starting: not counted, as a failed probe is not
	}
	p.hung = true
	p.strikes++
	p.strike = Strike{Result: Result{At: now, Error: fmt.Sprintf("every process stopped or frozen for %s (%d looks %s apart), no answer meanwhile",
		now.Sub(p.stoppedAt).Round(time.Millisecond), p.stopped, p.spec.Interval)}, InARow: p.consecutive, Stopped: true}
}

// maxInFlight is how many probes can wait at once: those started within one
// timeout, and the next.
func maxInFlight(timeout, interval time.Duration) int {
	if interval <= 0 {
		return 1
	}
	return int((timeout+interval-1)/interval) + 1
}

// record adds one result, unless the probe was re-armed since it began.
func (p *Probe) record(epoch int, r Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if epoch != p.epoch {
		return
	}
	p.probes++
	p.last = &r
	if r.OK {
		if !p.started || p.consecutive >= p.spec.Threshold || p.hung {
			p.healthySince = r.At
		}
		p.started, p.consecutive = true, 0
		p.stopped, p.hung = 0, false
		return
	}
	if r.Code != 0 {
		p.stopped = 0 // it answered, if not healthy: it runs
	}
	p.bad++
	if !p.started && p.now().Sub(p.armedAt) < p.spec.Grace {
		return // still starting: not counted
	}
	p.consecutive++
	if p.consecutive >= p.spec.Threshold {
		p.strikes++
		p.strike = Strike{Result: r, InARow: p.consecutive}
	}
}
