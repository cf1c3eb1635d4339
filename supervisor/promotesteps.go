package supervisor

import (
	"fmt"
	"strings"
	"time"
)

// promotionSteps times the steps of one promotion, from its job's start
// (just after the win) to the units' start: the history's "units started"
// event carries them, and the drill prints them (issue 21 item 5: what the
// new leader waits for between winning and its first act).
type promotionSteps struct {
	last  time.Time
	steps []promotionStep
}

type promotionStep struct {
	name string
	took time.Duration
}

func startSteps(now time.Time) *promotionSteps { return &promotionSteps{last: now} }

// done ends the step called name at now.
func (p *promotionSteps) done(name string, now time.Time) {
	p.steps = append(p.steps, promotionStep{name, now.Sub(p.last)})
	p.last = now
}

// String lists the steps with their durations, "barrier 12ms, start 310ms".
func (p *promotionSteps) String() string {
	if p == nil || len(p.steps) == 0 {
		return ""
	}
	parts := make([]string, len(p.steps))
	for i, st := range p.steps {
		parts[i] = fmt.Sprintf("%s %s", st.name, roundStep(st.took))
	}
	return strings.Join(parts, ", ")
}

// roundStep keeps a step readable: whole milliseconds, or 0.1 ms under one.
func roundStep(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Millisecond)
}

// unitsStartedReason is the Active transition's reason with the steps.
func unitsStartedReason(p *promotionSteps) string {
	if s := p.String(); s != "" {
		return "units started (" + s + ")"
	}
	return "units started"
}
