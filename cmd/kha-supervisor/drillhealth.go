package main

import (
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
)

// drillHealth is the drill's last step when [health] probes are
// configured: the new leader's record saying every probed unit is healthy.
type drillHealth struct {
	probed  []string  // the units with a probe in this node's configuration; none: no step
	healthy time.Time // when the new leader's record first said so (its publication time)
}

// probedUnits lists the units the configuration probes.
func (s *session) probedUnits() []string {
	probes, err := s.cfg.Health.ProbeList()
	if err != nil {
		return nil
	}
	var units []string
	for _, p := range probes {
		units = append(units, p.Unit)
	}
	return units
}

// waitHealthy polls the new leader's record until every probed unit is
// healthy there, or timeout passes (the probe's grace may hold it: that is
// the figure an operator wants to see).
func (s *session) waitHealthy(e env, node string, after time.Time, timeout time.Duration) drillHealth {
	h := drillHealth{probed: s.probedUnits()}
	if len(h.probed) == 0 {
		return h
	}
	for end := time.Now().Add(timeout); time.Now().Before(end) && e.ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		cs, err := s.cluster(e)
		if err != nil {
			continue
		}
		if r, ok := findMember(cs, node); ok && r.State == group.Active && !r.Published.Before(after) && allHealthy(r, h.probed) {
			h.healthy = r.Published
			return h
		}
	}
	return h
}

func allHealthy(r group.Record, units []string) bool {
	for _, name := range units {
		ok := false
		for _, u := range r.Units {
			ok = ok || (u.Name == name && u.Health == health.StateHealthy)
		}
		if !ok {
			return false
		}
	}
	return true
}

// problem is the drill failure when probed units never became healthy.
func (h drillHealth) problem(node string) string {
	if len(h.probed) > 0 && h.healthy.IsZero() {
		return fmt.Sprintf("no record of %s's units becoming healthy (health probes of %v)", node, h.probed)
	}
	return ""
}
