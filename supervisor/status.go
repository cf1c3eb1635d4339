package supervisor

import (
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
)

// Status is a member's view of itself, safe to read from any goroutine
// (the guard socket, the HTTP endpoint).
type Status struct {
	Node          string              `json:"node"`
	Cluster       string              `json:"cluster"`
	State         group.State         `json:"state"`
	From          group.State         `json:"from,omitempty"`
	Reason        string              `json:"reason,omitempty"`
	Since         time.Time           `json:"since"`
	Leader        string              `json:"leader,omitempty"`
	LeaderToken   int64               `json:"leader_token,omitempty"`
	Token         int64               `json:"token,omitempty"` // ours, while holding the key
	UnitsAllowed  bool                `json:"units_allowed"`   // the promotion would start the units now: past the barrier and takeover_delay, record says running
	LeaseLeft     time.Duration       `json:"lease_left_ns"`   // guaranteed lease time left on our clock
	FenceIn       time.Duration       `json:"fence_in_ns"`     // time until fence_at
	StopMax       time.Duration       `json:"stop_max_ns"`
	Units         []fencing.UnitState `json:"units,omitempty"`
	CooldownUntil time.Time           `json:"cooldown_until,omitempty"`
	LastTick      time.Time           `json:"last_tick"`
	Frozen        bool                `json:"frozen,omitempty"`
	Banned        bool                `json:"banned,omitempty"`
	APIFence      *APIFenceStatus     `json:"api_fence,omitempty"`
	// Group problems (peers.go): members configured differently, and
	// configured peers without a member record for longer than a TTL.
	ConfigMismatch []string `json:"config_mismatch,omitempty"`
	MissingPeers   []string `json:"missing_peers,omitempty"`
	// Endpoints that answered for another etcd cluster (never counted).
	ForeignEndpoints []string `json:"foreign_endpoints,omitempty"`
	// Strays are managed components' processes running outside their
	// units, as of the last scan; StrayProcesses counts every one found.
	Strays         []StrayProcess `json:"strays,omitempty"`
	StrayProcesses int64          `json:"stray_processes,omitempty"`
	// ExecWatch: whether strays are found at their exec or by the poll only.
	ExecWatch *ExecWatchStatus `json:"exec_watch,omitempty"`
	// DropinProblems are managed units not bound to the supervisor as the
	// packaged drop-in requires (this member does not campaign while any
	// is listed); DropinMismatches counts the checks that found one.
	DropinProblems   []string `json:"dropin_problems,omitempty"`
	DropinMismatches int64    `json:"dropin_mismatches,omitempty"`
	// CooldownOverride: in cooldown, but campaigning because no other
	// member is eligible. Eligible: who could campaign now, as we see it.
	CooldownOverride bool     `json:"cooldown_override,omitempty"`
	Eligible         []string `json:"eligible,omitempty"`
	// Problems the group has that an operator must clear: unreadable
	// control records (ignored), an election key on no lease (deleted).
	Problems []string `json:"problems,omitempty"`
	// Health: the units' health probes ([health]); armed on the leader
	// while the unit runs, "off" otherwise.
	Health []health.Report `json:"health,omitempty"`
}

// Active reports whether the member is active with a lease it can prove.
func (st Status) Active() bool { return st.State == group.Active && st.LeaseLeft > 0 }

// Status returns a snapshot. Its term figures (token, units allowed, lease
// left, time to the fence instant) come from the published Term, read at
// the call on the fence clock.
func (s *Supervisor) Status() Status {
	s.snap.mu.Lock()
	st := s.snap.st
	s.snap.mu.Unlock()
	t := s.term.view.load()
	now := deadlineNow() // the Term measures on the fence clock
	st.FenceIn, st.LeaseLeft = t.FenceIn(now), t.LeaseLeft(now)
	// The guard may let a unit start only once the promotion itself would
	// start them: record says units may run, barrier and takeover delay
	// passed, and never while fencing (Term.Open).
	st.UnitsAllowed = t.Open
	st.APIFence = s.apiFenceStatus()
	st.ForeignEndpoints = s.pool.Foreign()
	st.Health = s.health.Reports()
	return st
}

// statusSnap is the loop's copy of its own state for other goroutines:
// the loop writes it (updateSnapshot), Status reads it, both under mu.
type statusSnap struct {
	mu sync.Mutex
	st Status
}

// updateSnapshot copies the loop's state for other goroutines.
func (s *Supervisor) updateSnapshot() {
	s.term.view.publish(s.describeTerm())
	s.snap.mu.Lock()
	defer s.snap.mu.Unlock()
	s.snap.st.State, s.snap.st.From, s.snap.st.Reason, s.snap.st.Since = s.loop.state, s.snap.st.State, s.loop.reason, s.loop.since
	if s.snap.st.From == s.loop.state {
		s.snap.st.From = s.loop.prevState
	}
	s.snap.st.Leader, s.snap.st.LeaderToken = s.loop.leader.Node, s.loop.leader.Token
	s.snap.st.Token = s.term.token
	if s.watch.last != nil {
		s.snap.st.Units = s.watch.last
	}
	s.snap.st.CooldownUntil = s.loop.cooldown
	s.snap.st.LastTick = s.now()
	s.snap.st.Frozen, s.snap.st.Banned = s.seen.ctl.Freeze != nil, s.seen.ctl.Banned(s.cfg.Node)
	s.snap.st.CooldownOverride = s.loop.overriding && s.now().Before(s.loop.cooldown)
	s.snap.st.Eligible = s.eligible(s.now())
	s.snap.st.Problems = append([]string(nil), s.seen.ctl.Unreadable...)
	if s.seen.keyProblem != "" {
		s.snap.st.Problems = append(s.snap.st.Problems, s.seen.keyProblem)
	}
}
