package supervisor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

// dropinEvery is how many unit polls pass between two checks of the units'
// bindings: a daemon-reload that loaded a bad drop-in is noticed within it.
const dropinEvery = 10

// dropinVerdict is one check of the managed units' bindings.
type dropinVerdict struct {
	checked  bool     // at least one check finished
	problems []string // empty: every binding as the packaged drop-in sets it
}

// dropinWatch holds the last verdict: the checker goroutine and a
// campaign's last look (dropinsStillGood) store it, the loop reads it
// (mayCampaign). Any goroutine may call its methods.
type dropinWatch struct{ last atomic.Pointer[dropinVerdict] }

func (w *dropinWatch) store(v dropinVerdict) { w.last.Store(&v) }

// problems are those of the last verdict (nil: none yet).
func (w *dropinWatch) problems() []string {
	if v := w.last.Load(); v != nil {
		return v.problems
	}
	return nil
}

// allowCampaign reports whether the last check found the units bound as
// required (and one has finished).
func (w *dropinWatch) allowCampaign() bool {
	v := w.last.Load()
	return v != nil && v.checked && len(v.problems) == 0
}

// checkDropins reads each managed unit's BindsTo, After, ExecStartPre,
// TimeoutStopUSec, KillMode and SendSIGKILL at start and every dropinEvery
// polls (every poll while a check fails), on its own goroutine; the
// campaign itself reads them once more (dropinsStillGood). A mismatch keeps this member from
// campaigning (mayCampaign), is logged naming unit, property and the fix,
// and shows in status and /healthz. Units that cannot report bindings are
// not checked.
func (s *Supervisor) checkDropins(bg context.Context) {
	br, ok := s.units.(fencing.BindingReader)
	if !ok {
		s.dropins.store(dropinVerdict{checked: true})
		return
	}
	var last []string
	for {
		// While something is wrong, look every poll: a fixed drop-in lets
		// the member campaign again within one.
		every := dropinEvery * s.cfg.Units.PollInterval
		if probs, err := s.readDropins(bg, br); err != nil {
			every = s.cfg.Units.PollInterval
			// Keep the last verdict (none yet: no campaign): a passing D-Bus
			// error must not hold up a failover, nor clear a known problem.
			s.log.Warn("cannot read the managed units' drop-in settings", "err", err)
		} else {
			last = s.noteDropins(probs, last)
			if len(probs) > 0 {
				every = s.cfg.Units.PollInterval
			}
		}
		if sleep(bg, every) != nil {
			return
		}
	}
}

// noteDropins records a verdict (for mayCampaign, status and /healthz) and
// logs it when it differs from last; it returns the verdict to compare the
// next one with.
func (s *Supervisor) noteDropins(probs, last []string) []string {
	if !slices.Equal(probs, last) {
		for _, p := range probs {
			s.log.Error("managed unit not bound to the supervisor as required; refusing to campaign", "problem", p)
		}
		if len(probs) == 0 && last != nil {
			s.log.Info("managed units' drop-ins are in order again")
		}
	}
	s.dropins.store(dropinVerdict{checked: true, problems: probs})
	s.snap.mu.Lock()
	s.snap.st.DropinProblems = probs
	if len(probs) > 0 {
		s.snap.st.DropinMismatches++
	}
	s.snap.mu.Unlock()
	return probs
}

// errDropinsBroken stops a campaign: a unit's bindings changed since the
// last periodic check (a daemon-reload loaded a bad drop-in).
var errDropinsBroken = errors.New("a managed unit is not bound to the supervisor as required (see the error above); not campaigning")

// dropinsStillGood reads the bindings once more right before a campaign:
// the periodic check may be up to dropinEvery polls old. A read error
// fails this campaign (it is tried again at the next step).
func (s *Supervisor) dropinsStillGood(ctx context.Context) error {
	br, ok := s.units.(fencing.BindingReader)
	if !ok {
		return nil
	}
	probs, err := s.readDropins(ctx, br)
	if err != nil {
		return fmt.Errorf("check the managed units' drop-ins before campaigning: %w", err)
	}
	if len(s.noteDropins(probs, s.dropins.problems())) > 0 {
		return errDropinsBroken
	}
	return nil
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
			probs = append(probs, b.Problems(layout.SupervisorUnit, s.cfg.Units.StopTimeout)...)
		}
	}
	return probs, nil
}
