// Package report holds what the lab measured, typed: reports of runs and
// their results with the figures each scenario measured, the aggregate table
// and the documents generated from saved runs (docs/failure-modes.md,
// docs/operator-scenarios.md, the timeline picture). The scenarios
// (lab/scenario) fill it; nothing here runs the lab.
package report

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Standard metric names (milliseconds). Each scenario fills those that
// apply.
const (
	MStopped  = "stopped"     // fault -> last heartbeat of the old leader's units
	MWon      = "won"         // fault -> the observer saw another node win the election key
	MFailover = "failover"    // fault -> every unit beating on the new leader
	MMargin   = "margin"      // won - last heartbeat of the old leader's units (> 0: stopped before anyone could win)
	MGap      = "unavailable" // longest span in which some unit ran nowhere
)

// Result is one execution of one scenario.
type Result struct {
	ID        int                `json:"id"`
	Name      string             `json:"name"`
	Fault     string             `json:"fault"`
	Expected  string             `json:"expected"`
	Repeat    int                `json:"repeat"`
	Pass      bool               `json:"pass"`
	Problems  []string           `json:"problems,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
	Leader    string             `json:"leader,omitempty"` // at the start
	NewLeader string             `json:"new_leader,omitempty"`
	Start     time.Time          `json:"start"`
	FaultAt   time.Time          `json:"fault_at"`
	HealAt    time.Time          `json:"heal_at,omitempty"`
	End       time.Time          `json:"end"`
	Metrics   map[string]float64 `json:"metrics_ms"`
	// Figures are what the scenario found beyond its metrics, typed, for
	// the documents (the notes are for people reading one report).
	Figures   Figures  `json:"figures,omitzero"`
	OverlapMS float64  `json:"overlap_ms"`
	Overlaps  []string `json:"overlaps,omitempty"`
	// Excused are overlaps the scenario itself caused on purpose by
	// bypassing the safety net (scenario 10: an operator removes the guard
	// and starts a unit by hand). They are reported, never hidden.
	Excused  []string `json:"excused_overlaps,omitempty"`
	Timeline []Mark   `json:"timeline,omitempty"`
	// Alive is when each node ran each unit during the scenario and the 3 s
	// before it (merged witness intervals), for the timeline picture.
	Alive []Span `json:"alive,omitempty"`
}

// Figures are the findings of one result that the documents quote. Each
// scenario fills the fields that are its own; the rest stay empty.
type Figures struct {
	// GuardMessage is what the guard printed refusing an operator's start
	// on the standby (scenario 9).
	GuardMessage string `json:"guard_message,omitempty"`
	// Handoffs are the handoffs scenario 16 measured, in order.
	Handoffs []Handoff `json:"handoffs,omitempty"`
	// Drills are the `kha-supervisor drill` runs of scenario 19, in order.
	Drills []Drill `json:"drills,omitempty"`
	// BanRefusals are the refused `handoff --to BANNED` of scenario 18,
	// one sentence each.
	BanRefusals []string `json:"ban_refusals,omitempty"`
	// Upgrades are scenario 22's package upgrades (one sentence each), and
	// GuardAnswers what the guard said there to a start it refused.
	Upgrades     []string `json:"upgrades,omitempty"`
	GuardAnswers []string `json:"guard_answers,omitempty"`
	// PromotionFailures are the promotions that failed during the result
	// (any scenario; on this host systemd sometimes refuses a unit's
	// cgroup), one sentence each starting with PromotionFailedNote. The
	// operator doc leaves such runs out of its prose.
	PromotionFailures []string `json:"promotion_failures,omitempty"`
}

// PromotionFailedNote starts the sentence of a failed promotion.
const PromotionFailedNote = "promotion failed on "

// Handoff is one measured handoff, in milliseconds from the command; -1 is
// not measured.
type Handoff struct {
	Total      float64 `json:"total_ms"`      // -> every target unit beating
	Supervisor float64 `json:"supervisor_ms"` // -> the target's first start job began
	UnitStop   float64 `json:"unit_stop_ms"`  // the old leader's units' own stop time (within Supervisor)
	UnitStart  float64 `json:"unit_start_ms"` // first start job -> every unit beating
}

// Drill is one `kha-supervisor drill ARGS` run.
type Drill struct {
	Args     string   `json:"args"` // e.g. "failover --expect-within 30s"
	Exit     int      `json:"exit"`
	WantExit int      `json:"want_exit"`
	Output   []string `json:"output"` // the printed lines, blank ones dropped
	// Witness is what the witness heartbeats showed of the takeover (""
	// when the output had no timeline to compare with).
	Witness string `json:"witness,omitempty"`
}

// Note is the drill as one line: the command, its exit and its output.
func (d Drill) Note() string {
	return "drill " + d.Args + " -> exit " + strconv.Itoa(d.Exit) + ": " + strings.Join(d.Output, " / ")
}

// Span is one node's unit alive from From to To.
type Span struct {
	Node string    `json:"node"`
	Unit string    `json:"unit"`
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Mark is one instant of a run's timeline, on either plane: the stand-in
// lab's (At, Label, Node: the report's picture) and the real plane's,
// which also name the event (Key: the same event in every trial, a row of
// `kha-lab timeline`), whose behaviour it is (Owner) and how it was
// measured (Source).
type Mark struct {
	Key    string    `json:"key,omitempty"`
	At     time.Time `json:"at"`
	Label  string    `json:"label"`
	Node   string    `json:"node,omitempty"`
	Owner  string    `json:"owner,omitempty"`
	Source string    `json:"source,omitempty"`
}

// UnmarshalJSON also reads the real plane's runs saved before the one Mark,
// whose label was "what".
func (m *Mark) UnmarshalJSON(b []byte) error {
	type plain Mark
	var v struct {
		plain
		What string `json:"what"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*m = Mark(v.plain)
	if m.Label == "" {
		m.Label = v.What
	}
	return nil
}
