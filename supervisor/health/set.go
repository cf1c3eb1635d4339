package health

import (
	"context"
	"time"
)

// Target is one unit's URL.
type Target struct {
	Unit string
	URL  string
}

// Settings are shared by every probe of a Set.
type Settings struct {
	TLS       TLS
	Interval  time.Duration
	Timeout   time.Duration
	Threshold int
	Grace     time.Duration
	// Stopped, when set, says whether a unit's processes are all stopped or
	// frozen (Spec.Stopped).
	Stopped func(unit string) (bool, error)
}

// Set holds the probes of the units that have one, in the given order. A
// nil *Set has no probes; its methods are no-ops.
type Set struct {
	probes []*Probe
}

// NewSet builds a disarmed probe per target.
func NewSet(targets []Target, s Settings) (*Set, error) {
	set := &Set{}
	for _, t := range targets {
		c, err := NewChecker(t.URL, s.TLS, s.Timeout)
		if err != nil {
			return nil, err
		}
		spec := Spec{Unit: t.Unit, Interval: s.Interval, Threshold: s.Threshold, Grace: s.Grace}
		if s.Stopped != nil {
			unit := t.Unit
			spec.Stopped = func() (bool, error) { return s.Stopped(unit) }
		}
		set.probes = append(set.probes, NewProbe(spec, c))
	}
	return set, nil
}

// Probe returns unit's probe, or nil.
func (s *Set) Probe(unit string) *Probe {
	if s == nil {
		return nil
	}
	for _, p := range s.probes {
		if p.Unit() == unit {
			return p
		}
	}
	return nil
}

// Arm arms unit's probe, if it has one.
func (s *Set) Arm(ctx context.Context, unit string) {
	if p := s.Probe(unit); p != nil {
		p.Arm(ctx)
	}
}

// Disarm disarms unit's probe, if it has one.
func (s *Set) Disarm(unit string) {
	if p := s.Probe(unit); p != nil {
		p.Disarm()
	}
}

// DisarmAll stops every probe: this node does not lead.
func (s *Set) DisarmAll() {
	if s == nil {
		return
	}
	for _, p := range s.probes {
		p.Disarm()
	}
}

// Reports lists every probe's view, nil without probes.
func (s *Set) Reports() []Report {
	if s == nil {
		return nil
	}
	out := make([]Report, 0, len(s.probes))
	for _, p := range s.probes {
		out = append(out, p.Report())
	}
	return out
}

// Rearm re-arms unit's probe with a fresh grace (its process was
// replaced), if it has one.
func (s *Set) Rearm(ctx context.Context, unit string) {
	if p := s.Probe(unit); p != nil {
		p.Rearm(ctx)
	}
}

// State is unit's probe state while armed ("" without a probe or while
// not probing), for the member record.
func (s *Set) State(unit string) string {
	p := s.Probe(unit)
	if p == nil {
		return ""
	}
	if st := p.Report().State; st != StateOff {
		return st
	}
	return ""
}
