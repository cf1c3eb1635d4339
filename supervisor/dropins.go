package supervisor

import (
	"context"
	"slices"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

// dropinEvery is how many unit polls pass between two checks of the units'
// bindings: a daemon-reload that loaded a bad drop-in is noticed within it.
const dropinEvery = 10

// dropinCheck is the last verdict on the managed units' bindings.
type dropinCheck struct {
	checked  bool     // at least one check finished
	problems []string // empty: every binding as the packaged drop-in sets it
}

// checkDropins reads each managed unit's BindsTo, After, ExecStartPre,
// TimeoutStopUSec, KillMode and SendSIGKILL at start and every dropinEvery
// polls (every poll while a check fails), on its own goroutine. A mismatch keeps this member from
// campaigning (mayCampaign), is logged naming unit, property and the fix,
// and shows in status and /healthz. Units that cannot report bindings are
// not checked.
func (s *Supervisor) checkDropins(bg context.Context) {
	br, ok := s.units.(fencing.BindingReader)
	if !ok {
		s.dropins.Store(&dropinCheck{checked: true})
		return
	}
	var last []string
	for {
		// While something is wrong, look every poll: a fixed drop-in lets
		// the member campaign again within one.
		every := dropinEvery * s.cfg.Units.PollInterval.D()
		if probs, err := s.readDropins(bg, br); err != nil {
			every = s.cfg.Units.PollInterval.D()
			// Keep the last verdict (none yet: no campaign): a passing D-Bus
			// error must not hold up a failover, nor clear a known problem.
			s.log.Warn("cannot read the managed units' drop-in settings", "err", err)
		} else {
			if !slices.Equal(probs, last) {
				for _, p := range probs {
					s.log.Error("managed unit not bound to the supervisor as required; refusing to campaign", "problem", p)
				}
				if len(probs) == 0 && last != nil {
					s.log.Info("managed units' drop-ins are in order again")
				}
				last = probs
			}
			s.dropins.Store(&dropinCheck{checked: true, problems: probs})
			if len(probs) > 0 {
				every = s.cfg.Units.PollInterval.D()
			}
			s.mu.Lock()
			s.snap.DropinProblems = probs
			if len(probs) > 0 {
				s.snap.DropinMismatches++
			}
			s.mu.Unlock()
		}
		if sleep(bg, every) != nil {
			return
		}
	}
}

func (s *Supervisor) readDropins(bg context.Context, br fencing.BindingReader) ([]string, error) {
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	bs, err := br.Bindings(ctx, s.cfg.Units.Managed)
	if err != nil {
		return nil, err
	}
	probs := []string{}
	for _, u := range s.cfg.Units.Managed {
		if b, ok := bs[u]; ok {
			probs = append(probs, b.Problems(layout.SupervisorUnit, s.cfg.Units.StopTimeout.D())...)
		}
	}
	return probs, nil
}

// dropinsAllowCampaign reports whether the last check found the units
// bound as required (and one has finished).
func (s *Supervisor) dropinsAllowCampaign() bool {
	c := s.dropins.Load()
	return c != nil && c.checked && len(c.problems) == 0
}
