// Package report holds what the lab measured, typed: reports of runs and
// their results with the figures each scenario measured (one Result for the
// stand-in lab and the real plane), the aggregate table and the documents
// generated from saved runs (docs/failure-modes.md,
// docs/operator-scenarios.md, the timeline picture). The scenarios
// (lab/scenario) and the real plane's runner (lab/kube/plane) fill it;
// nothing here runs the lab.
package report

import (
	"encoding/json"
	"fmt"
	"reflect"
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

// Result is one execution of one scenario, on either plane: a stand-in
// lab's run (the matrix, a soak) or a real-plane trial in one mode. The
// fields above the two parts are both planes'; each plane fills its own
// part (StandIn, RealPlane) and saves only that one (MarshalJSON). Runs
// saved before the one Result still load (UnmarshalJSON): the real plane
// named the scenario "scenario" and kept its own figures as a plain map.
type Result struct {
	ID        int       `json:"id"`
	Name      string    `json:"name"`
	Mode      string    `json:"mode,omitempty"` // the real plane's: how the plane ran (plane.Mode)
	Repeat    int       `json:"repeat"`
	Pass      bool      `json:"pass"`
	Problems  []string  `json:"problems,omitempty"`
	Notes     []string  `json:"notes,omitempty"`
	Leader    string    `json:"leader,omitempty"` // at the fault
	NewLeader string    `json:"new_leader,omitempty"`
	FaultAt   time.Time `json:"fault_at"`
	// HealAt is when the fault was undone (zero: nothing to undo).
	HealAt time.Time `json:"heal_at,omitzero"`
	// Overlaps are the intervals in which two nodes ran a unit (stand-in)
	// or both masters' components wrote (real plane), one sentence each.
	Overlaps []string `json:"overlaps,omitempty"`
	Timeline []Mark   `json:"timeline,omitempty"`
	// Figures are what the scenario found beyond its metrics, typed, for
	// the documents (the notes are for people reading one report).
	Figures Figures `json:"figures,omitzero"`

	StandIn
	RealPlane
}

// StandIn is the stand-in lab's part of a result.
type StandIn struct {
	Fault     string             `json:"fault"`
	Expected  string             `json:"expected"`
	Start     time.Time          `json:"start"`
	End       time.Time          `json:"end"`
	Metrics   map[string]float64 `json:"metrics_ms"`
	OverlapMS float64            `json:"overlap_ms"`
	// Excused are overlaps the scenario itself caused on purpose by
	// bypassing the safety net (scenario 10: an operator removes the guard
	// and starts a unit by hand). They are reported, never hidden.
	Excused []string `json:"excused_overlaps,omitempty"`
	// Alive is when each node ran each unit during the scenario and the 3 s
	// before it (merged witness intervals), for the timeline picture.
	Alive []Span `json:"alive,omitempty"`
}

// RealPlane is the real control plane's part of a result: one trial's
// figures (milliseconds) and both judges' verdicts.
type RealPlane struct {
	CMLeader   string    `json:"cm_leader"`
	FaultDone  time.Time `json:"fault_done"`    // the fault completely in place
	SchedMS    float64   `json:"scheduler_ms"`  // fault -> first pod created after the fault bound
	UnboundMS  float64   `json:"unbound_ms"`    // longest a probe pod stayed unbound
	CMMS       float64   `json:"controller_ms"` // longest a deleted ReplicaSet pod stayed unreplaced
	ColdMS     float64   `json:"cold_start_ms"` // new leader's scheduler unit start -> its first bind (0: no new unit)
	DoubleBind int       `json:"double_binds"`
	ExtraRS    int       `json:"extra_rs_pods"`
	Writes     string    `json:"writes"`
	// The fence at the API server (fenced modes; plane/fence.go).
	Fence       string   `json:"fence,omitempty"`
	Stale       int      `json:"stale_accepted"`
	StaleWrites []string `json:"stale_writes,omitempty"`
	Refused     int      `json:"refused_by_policy"`
	Facts       []string `json:"facts,omitempty"`
	// Handoff is, per component, when the faulted leader's master wrote
	// last and the other master first (accepted writes at the resource).
	Handoff map[string]ResourceHandoff `json:"handoff,omitempty"`
	// Finding: leader election let both masters write (an overlap,
	// a double binding, extra pods). The trial does not pass, but it is
	// what the comparison measures, not a failure of the lab.
	Finding string `json:"finding,omitempty"`

	// The judge at etcd (plane/commits.go): what etcd committed of the
	// managed components' writes from just before the fault. LateCommits:
	// writes of a term committed after the next term's first write (any
	// fails the trial); GhostWrites: committed without an accepted audit
	// entry (reported: the audit judge does not see them).
	Etcd        string   `json:"etcd,omitempty"`
	LateCommits int      `json:"late_commits"`
	LateList    []string `json:"late_list,omitempty"`
	GhostWrites int      `json:"ghost_writes"`
	GhostList   []string `json:"ghost_list,omitempty"`
	// Exits: the components ("master/unit") that ran before the fault and
	// whose process did not run through the trial ("... stopped",
	// "... restarted"): a failover's stop, a restart in place, or a
	// leader-elected component exiting on a lost Lease.
	Exits []string `json:"exits,omitempty"`
}

// ResumedMS is the trial's "service resumed": the later of the longest
// pod unbound and the longest unreplaced ReplicaSet pod (both components
// act again). Not "scheduler back": when the old leader still binds for a
// moment after the fault (42: its units stop ~0.4 s after the supervisor
// dies), the first new binding is the old leader's, not the end of the
// outage.
func (r RealPlane) ResumedMS() float64 { return max(r.UnboundMS, r.CMMS) }

// LabFailure reports a result the run must fail for: any failed one but a
// real-plane leader-election trial whose only harm is its finding.
func (r Result) LabFailure() bool {
	return !r.Pass && (r.Finding == "" || len(r.Problems) > 0)
}

// MarshalJSON writes both planes' fields and the part of the plane that
// filled it (neither, when both are empty).
func (r Result) MarshalJSON() ([]byte, error) {
	type plain Result
	// The parts at depth 1 hide plain's own at depth 2: a nil one is left
	// out whole.
	v := struct {
		plain
		*StandIn
		*RealPlane
	}{plain: plain(r)}
	if !reflect.ValueOf(r.StandIn).IsZero() {
		v.StandIn = &r.StandIn
	}
	if !reflect.ValueOf(r.RealPlane).IsZero() {
		v.RealPlane = &r.RealPlane
	}
	return json.Marshal(v)
}

// UnmarshalJSON also reads the real plane's runs saved before the one
// Result, which named the scenario "scenario".
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	var v struct {
		plain
		Scenario string `json:"scenario"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Result(v.plain)
	if r.Name == "" {
		r.Name = v.Scenario
	}
	return nil
}

// ResourceHandoff is one component's handoff at the resource (real plane),
// in milliseconds after the fault (negative: before it); nil when there
// was no such write.
type ResourceHandoff struct {
	// LastOldMS: the faulted leader's master's last accepted write from
	// the window's start (2 s before the fault) until the other master's
	// first, else until the heal.
	LastOldMS *float64 `json:"last_old_ms,omitempty"`
	// FirstOtherMS: the other master's first accepted write after the
	// fault.
	FirstOtherMS *float64 `json:"first_other_ms,omitempty"`
}

// MarginMS is how long nobody wrote between the old master's last write
// and the new one's first (negative: both wrote at once); false when
// either write is missing.
func (h ResourceHandoff) MarginMS() (float64, bool) {
	if h.LastOldMS == nil || h.FirstOtherMS == nil {
		return 0, false
	}
	return *h.FirstOtherMS - *h.LastOldMS, true
}

func (h ResourceHandoff) String() string {
	f := func(p *float64) string {
		if p == nil {
			return "none"
		}
		return fmt.Sprintf("%.0f ms", *p)
	}
	return "old master's last write " + f(h.LastOldMS) + ", other's first " + f(h.FirstOtherMS)
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
	// Values are a real-plane scenario's own figures, by name (its Judge
	// and After hooks): counts, and milliseconds where the name ends in
	// _ms.
	Values map[string]float64 `json:"values,omitempty"`
}

// UnmarshalJSON also reads the real plane's runs saved before the one
// Result, whose figures were the plain map that is Values now.
func (f *Figures) UnmarshalJSON(b []byte) error {
	var values map[string]float64
	if err := json.Unmarshal(b, &values); err == nil {
		*f = Figures{Values: values}
		if len(values) == 0 {
			f.Values = nil
		}
		return nil
	}
	type plain Figures
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Figures(v)
	return nil
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
