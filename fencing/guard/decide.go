// Package guard is the local, root-only unix socket that the managed units'
// ExecStartPre= asks before they may start ("kha-supervisor guard UNIT").
//
// systemd can start a managed unit behind the supervisor's back (an operator's
// `systemctl start`, a try-restart of a bound unit), so the unit itself asks
// the supervisor first and fails loudly when this node does not hold a valid
// lease with enough time left to stop it again. The wire protocol is one JSON
// request line and one JSON answer line per connection; ops beyond the
// built-in "guard" can be added with Server.Handle.
package guard

import (
	"fmt"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// Status is the supervisor's view that a guard decision is taken from. The
// core fills it on every request through the function given to
// Server.SetStatus, so it must be cheap to produce.
type Status struct {
	Node    string `json:"node"`
	Cluster string `json:"cluster"`
	State   string `json:"state"`  // standby, promoting, active, demoting, fencing, ...
	Leader  string `json:"leader"` // current leader's node name; empty when none is known
	Token   int64  `json:"token"`  // the leader's fencing token (election key revision); 0 when unknown

	// UnitsAllowed is set by the core only where its promotion itself would
	// start the units: it holds a verified lease, passed the promotion
	// barrier and takeover_delay, and published units_running (promoting
	// from then on, or active), and its fence instant has not come (the
	// term's one predicate, see StatusOf). Everything else refuses, a node
	// held at the barrier included.
	UnitsAllowed bool `json:"units_allowed"`

	// LeaseLeft is how long the lease is still guaranteed valid on this
	// node's clock; StopMax is the worst-case time to stop the units. A unit
	// may only start when it could still be stopped before the lease lapses.
	LeaseLeft time.Duration `json:"lease_left_ns"`
	StopMax   time.Duration `json:"stop_max_ns"`
}

// StatusOf is the guard's view of a term at now: UnitsAllowed is the term's
// one predicate (fencing.Term.MayAct: open, a token, the fence instant not
// come), LeaseLeft the term's on the fence clock. While the term may act the
// lease has more than StopMax + max(delta, W) left, so Decide's lease
// check, kept for a status from any other source, never refuses what
// MayAct allows.
func StatusOf(t fencing.Term, now time.Time) Status {
	g := Status{Node: t.Node, Cluster: t.Cluster, State: t.State, Leader: t.Leader, Token: t.LeaderToken,
		UnitsAllowed: t.MayAct(now), LeaseLeft: t.LeaseLeft(now), StopMax: t.StopMax}
	if t.Token != 0 {
		g.Leader, g.Token = t.Node, t.Token
	}
	return g
}

// Answer is the result of the "guard" op.
type Answer struct {
	Allowed bool   `json:"allowed"`
	Unit    string `json:"unit"`
	// Message is one line for the journal: why the unit may or may not start,
	// naming the current leader.
	Message string `json:"message"`
	Status  Status `json:"status"`
}

// Decide is the guard's whole policy, a pure function of the status: a unit
// may start iff the core allows units and the lease has at least StopMax
// left (and any time left at all, so a zero StopMax never admits an expired
// lease).
func Decide(unit string, s Status) Answer {
	a := Answer{Unit: unit, Status: s}
	node := orUnknown(s.Node)
	refuse := func(why string) Answer {
		a.Message = fmt.Sprintf("kha-supervisor: refusing to start %s on %s: %s", unit, node, why)
		return a
	}
	switch {
	case !s.UnitsAllowed:
		return refuse(notAllowedReason(s))
	case s.LeaseLeft <= 0 || s.LeaseLeft < s.StopMax:
		return refuse(fmt.Sprintf("lease has %s left, under the %s needed to stop it; %s",
			roundDur(max(s.LeaseLeft, 0)), roundDur(s.StopMax), leaderPart(s)))
	}
	a.Allowed = true
	a.Message = fmt.Sprintf("kha-supervisor: %s may start on %s: this node is %s (token %d), lease has %s left",
		unit, node, orUnknown(s.State), s.Token, roundDur(s.LeaseLeft))
	return a
}

func notAllowedReason(s Status) string {
	state := orUnknown(s.State)
	if s.Leader != "" && s.Leader == s.Node {
		// Holding the lease without UnitsAllowed: before the promotion
		// barrier, or on the way out (demoting, fencing).
		return fmt.Sprintf("this node is %s and may not run units now; %s", state, leaderPart(s))
	}
	return fmt.Sprintf("this node is %s; %s", state, leaderPart(s))
}

func leaderPart(s Status) string {
	switch {
	case s.Leader == "":
		return "no leader is known"
	case s.Leader == s.Node:
		return fmt.Sprintf("leader is this node (token %d)", s.Token)
	case s.Token > 0:
		return fmt.Sprintf("leader is %s (token %d)", s.Leader, s.Token)
	default:
		return fmt.Sprintf("leader is %s", s.Leader)
	}
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(unknown)"
	}
	return s
}

// roundDur prints durations the way an operator reads them: 1.2s, 3s, 450ms.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d
	}
}
