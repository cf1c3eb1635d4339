package supervisor

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
)

// unitWatch is what the loop knows of the managed units (loop-owned): the
// last reading and its time, the failures counted, systemd's restart
// counters, the start-pre grace on a standby and what the last record said.
type unitWatch struct {
	last      []fencing.UnitState
	lastAt    time.Time            // when last was read
	failures  []time.Time          // within the failure window
	restarts  map[string]uint32    // NRestarts as last seen
	startPre  map[string]time.Time // standby: when a unit was first seen in start-pre
	published string               // unit states in the last published record
}

// onUnits records the managed units' states and counts failures on the
// leader.
func (s *Supervisor) onUnits(bg context.Context, o unitObs) {
	if s.jobs.cur != nil || o.started.Before(s.jobs.lastEnd) {
		return // in flux, or read before the last job changed things
	}
	if o.err != nil {
		// Not seeing the units is not the same as their being stopped.
		s.log.Warn("cannot read managed units", "err", o.err)
		return
	}
	s.noteUnits(o)
	s.assessUnits(bg, o)
}

// assessUnits counts failures on the leader: a unit not running, or one
// systemd restarted since the last look. Reaching the threshold demotes.
func (s *Supervisor) assessUnits(bg context.Context, o unitObs) {
	if s.loop.state != group.Active {
		s.health.DisarmAll() // standbys do not probe
		return
	}
	now := s.now()
	for _, u := range o.states {
		base, seen := s.watch.restarts[u.Name]
		s.watch.restarts[u.Name] = u.NRestarts
		switch {
		case !u.Running():
			s.health.Disarm(u.Name)
			s.failed(now, fmt.Sprintf("%s is %s", u.Name, u.ActiveState))
		case seen && u.NRestarts > base:
			s.health.Rearm(bg, u.Name) // a new process: a new grace
			s.failed(now, fmt.Sprintf("%s was restarted by systemd (%d restarts)", u.Name, u.NRestarts))
		default:
			s.health.Arm(bg, u.Name)
		}
	}
	s.demoteAtThreshold(bg, now)
}

// demoteAtThreshold demotes into the cooldown once the unit failures within
// the window reach units.failure_threshold: restarts did not help, the
// other node gets its chance. It reports whether it demoted.
func (s *Supervisor) demoteAtThreshold(bg context.Context, now time.Time) bool {
	n := s.recentFailures(now)
	if n < s.cfg.Units.FailureThreshold {
		return false
	}
	s.demote(bg, "failure_threshold", fmt.Sprintf("%d unit failures within %s (threshold %d)", n, s.cfg.Units.FailureWindow, s.cfg.Units.FailureThreshold), s.cfg.Units.Cooldown)
	return true
}

// hungUnits takes the units whose probe found them unhealthy since the last
// look (health.failure_threshold failed probes in a row): components
// systemd reports active but that do not answer their own /healthz. Each
// counts one unit failure, as a crashed unit does, and is restarted in
// place (restartHungWork); when the failures reach the threshold the
// leader demotes instead. Their probes are disarmed: the restart re-arms
// them with a fresh grace, and the probes of the stopped process say
// nothing.
func (s *Supervisor) hungUnits(now time.Time) []string {
	var hung []string
	for _, u := range s.cfg.Units.Managed {
		p := s.health.Probe(u)
		if p == nil {
			continue
		}
		n, last := p.Take()
		if n == 0 {
			continue
		}
		p.Disarm()
		hung = append(hung, u)
		if last.Stopped {
			s.failed(now, fmt.Sprintf("%s is stopped, not answering its health probe: %s", u, last.Error))
			continue
		}
		s.failed(now, fmt.Sprintf("%s failed its health probe (%d in a row, threshold %d): %s",
			u, last.InARow, s.cfg.Health.FailureThreshold, last.Error))
	}
	return hung
}

// newHealthSet builds the probes the configuration names (nil: none). When
// units can tell a stopped or frozen unit (fencing.StopReader: systemd, from
// the unit's control group), the probes call such a unit hung after two to
// three intervals instead of timeout + (threshold-1) x interval.
func newHealthSet(c config.Config, units fencing.Units) (*health.Set, error) {
	probes, err := c.Health.ProbeList()
	if err != nil || len(probes) == 0 {
		return nil, err
	}
	h := c.Health
	set := health.Settings{TLS: health.TLS{Insecure: h.Insecure}, Interval: h.Interval, Timeout: h.Timeout,
		Threshold: h.FailureThreshold, Grace: h.Grace}
	if sr, ok := units.(fencing.StopReader); ok {
		set.Stopped = sr.Stopped
	}
	if h.CA != "" {
		pem, err := os.ReadFile(h.CA)
		if err != nil {
			return nil, fmt.Errorf("health.ca: %w", err)
		}
		set.TLS.Roots = x509.NewCertPool()
		if !set.TLS.Roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("health.ca: %s holds no PEM certificate", h.CA)
		}
	}
	targets := make([]health.Target, 0, len(probes))
	for _, p := range probes {
		targets = append(targets, health.Target{Unit: p.Unit, URL: p.URL})
	}
	return health.NewSet(targets, set)
}

func (s *Supervisor) failed(now time.Time, what string) {
	s.watch.failures = append(s.watch.failures, now)
	s.log.Warn("managed unit failure", "what", what, "failures", s.recentFailures(now), "threshold", s.cfg.Units.FailureThreshold)
}

// recentFailures counts failures inside the failure window, dropping older
// ones.
func (s *Supervisor) recentFailures(now time.Time) int {
	cut := now.Add(-s.cfg.Units.FailureWindow)
	i := 0
	for i < len(s.watch.failures) && s.watch.failures[i].Before(cut) {
		i++
	}
	s.watch.failures = s.watch.failures[i:]
	return len(s.watch.failures)
}

// unitsSignature is what the record says of the units: their states and
// their probes' (a change is published).
func unitsSignature(states []fencing.UnitState, probes *health.Set) string {
	var b []byte
	for _, u := range states {
		b = append(b, u.Name...)
		b = append(b, '=')
		b = append(b, u.ActiveState...)
		b = append(b, '/')
		b = append(b, probes.State(u.Name)...)
		b = append(b, ';')
	}
	return string(b)
}

// noteUnits adopts a unit observation and republishes the record when the
// states changed, so status and the other members see them.
func (s *Supervisor) noteUnits(o unitObs) {
	s.watch.last, s.watch.lastAt = o.states, o.started
	if sig := unitsSignature(o.states, s.health); sig != s.watch.published {
		s.watch.published = sig
		s.updateSnapshot()
		offer(s.rec.wake, struct{}{})
	}
}

type unitObs struct {
	started time.Time
	states  []fencing.UnitState
	err     error
}

// observeUnits polls the managed units' states.
func (s *Supervisor) observeUnits(bg context.Context) {
	for {
		offer(s.in.unitObs, s.readUnits(bg))
		if sleep(bg, s.cfg.Units.PollInterval) != nil {
			return
		}
	}
}

// readUnits reads the managed units' states once, bounded by the poll
// interval.
func (s *Supervisor) readUnits(bg context.Context) unitObs {
	started := s.now()
	ctx, cancel := context.WithTimeout(bg, s.cfg.Units.PollInterval)
	defer cancel()
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	return unitObs{started: started, states: states, err: err}
}
