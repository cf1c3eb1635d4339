package supervisor

import (
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// mayCampaign reports whether this standby may try for the election key
// (see decideCampaign). A campaign that overrides our cooldown says so
// once per cooldown: a warning, a history event and a mark in status.
func (s *Supervisor) mayCampaign(now time.Time) bool {
	d := decideCampaign(now, s.campaignView())
	s.loop.overriding = d.Allowed && d.Override
	if s.loop.overriding && !s.loop.overrideNoted.Equal(s.loop.cooldown) {
		s.loop.overrideNoted = s.loop.cooldown
		s.log.Warn("campaigning despite the cooldown: no other member is eligible", "why", d.Why)
		s.recordHistory(group.Event{At: now, Node: s.cfg.Node, From: group.Standby, To: group.Standby, Kind: "cooldown_override", Reason: d.Why})
	}
	return d.Allowed
}

// startPreGrace is how long standby enforcement leaves a unit alone while
// it is still in its ExecStartPre= phase: that is where the guard runs, and
// it refuses the start itself with a message naming the leader; stopping
// the unit then would kill the guard before it could say so. The main
// process cannot run before ExecStartPre= succeeds, so waiting is safe; a
// unit that lingers there longer (the guard removed, another slow
// ExecStartPre=) is stopped like any other.
const startPreGrace = 5 * time.Second

// enforceable lists the managed units a standby must stop now.
func (s *Supervisor) enforceable(now time.Time) []string {
	var out []string
	for _, u := range s.watch.last {
		if !u.Running() {
			delete(s.watch.startPre, u.Name)
			continue
		}
		if u.SubState == "start-pre" || u.SubState == "condition" {
			first, ok := s.watch.startPre[u.Name]
			if !ok {
				s.watch.startPre[u.Name] = now
				continue
			}
			if now.Sub(first) < startPreGrace {
				continue
			}
		}
		out = append(out, u.Name)
	}
	return out
}

func runningUnits(states []fencing.UnitState) []string {
	var out []string
	for _, u := range states {
		if u.Running() {
			out = append(out, u.Name)
		}
	}
	return out
}
