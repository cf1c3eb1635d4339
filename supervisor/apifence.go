package supervisor

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// APIFence is the fence at the API server (package apifence): Publish runs
// at promotion after the barrier and before the first unit starts, and its
// error fails the promotion like a failed on_promote; Cut runs first thing
// when fencing or demoting and ends every connection the units have to the
// apiservers through their gates.
type APIFence interface {
	Publish(ctx context.Context, token int64) error
	Cut()
}

// APIFenceStatus is what status shows of the fence, when the APIFence
// also implements APIFenceReporter.
type APIFenceStatus struct {
	Mode  string            `json:"mode"`
	Token int64             `json:"token"`           // the token the apiservers hold, as last written or read; 0 unknown
	Gates map[string]string `json:"gates,omitempty"` // unit -> gate address
	// Term is the elected term's token as this member sees it (the
	// leader's); Matches: the apiservers hold exactly it (token mode).
	Term    int64 `json:"term,omitempty"`
	Matches bool  `json:"matches"`
	// The last handover this member made (Publish): the token, when it
	// was confirmed on every apiserver, and how long it took.
	Published   int64     `json:"published,omitempty"`
	PublishedAt time.Time `json:"published_at,omitempty"`
	TookMS      int64     `json:"took_ms,omitempty"`
	// Webhook is the token webhook's address, when it runs; Down the
	// apiservers the gates skip after a failed connection.
	Webhook string   `json:"webhook,omitempty"`
	Down    []string `json:"apiservers_down,omitempty"`
	// Unfenced: apiservers that admitted a stale token at the leader's
	// last self-check; Unlisted: apiservers the cluster knows and
	// api_fence.apiservers lacks.
	Unfenced []string `json:"apiservers_unfenced,omitempty"`
	Unlisted []string `json:"apiservers_unlisted,omitempty"`
	// WebhookOff: what is wrong with the token webhook's registration at
	// the leader's last self-check ("" in force or not checked).
	WebhookOff string `json:"webhook_off,omitempty"`
}

// APIFenceReporter is optional: an APIFence that reports its state.
type APIFenceReporter interface {
	APIFenceStatus() APIFenceStatus
}

// publishAPIFence is the one call from the promotion.
func (s *Supervisor) publishAPIFence(ctx context.Context, token int64) error {
	if s.opts.APIFence == nil {
		return nil
	}
	return s.opts.APIFence.Publish(ctx, token)
}

// cutAPI ends the units' API connections at once.
func (s *Supervisor) cutAPI() {
	if s.opts.APIFence != nil {
		s.opts.APIFence.Cut()
	}
}

func (s *Supervisor) apiFenceStatus() *APIFenceStatus {
	r, ok := s.opts.APIFence.(APIFenceReporter)
	if !ok {
		return nil
	}
	st := r.APIFenceStatus()
	s.snap.mu.Lock()
	st.Term = s.snap.st.LeaderToken
	s.snap.mu.Unlock()
	st.Matches = st.Term != 0 && st.Token == st.Term
	return &st
}

// ReportGateStranger records a process that an API gate refused because it
// does not run in the gated unit (apifence/gate/peer.go): counted with the
// stray processes and recorded in the history as a rogue process, like the
// stray scan's finds. Safe from any goroutine.
func (s *Supervisor) ReportGateStranger(unit string, pid int, cmdline, cgroup string) {
	s.snap.mu.Lock()
	s.snap.st.StrayProcesses++
	state := s.snap.st.State
	s.snap.mu.Unlock()
	s.recordHistory(group.Event{At: s.now(), Node: s.cfg.Node, From: state, To: state, Kind: "rogue_process",
		Reason: fmt.Sprintf("pid %d (%s, cgroup %s) used the API gate of %s from outside the unit: refused (403)", pid, cmdline, cgroup, unit)})
}

// apiFenceRecord is the record's part, nil when the fence is off.
func apiFenceRecord(st *APIFenceStatus) *group.APIFence {
	if st == nil {
		return nil
	}
	return &group.APIFence{Mode: st.Mode, Token: st.Token, Published: st.Published, PublishedAt: st.PublishedAt, TookMS: st.TookMS,
		Unfenced: st.Unfenced, Unlisted: st.Unlisted, WebhookOff: st.WebhookOff}
}
