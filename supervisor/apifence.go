package supervisor

import (
	"context"
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

// apiFenceRecord is the record's part, nil when the fence is off.
func apiFenceRecord(st *APIFenceStatus) *group.APIFence {
	if st == nil {
		return nil
	}
	return &group.APIFence{Mode: st.Mode, Token: st.Token, Published: st.Published, PublishedAt: st.PublishedAt, TookMS: st.TookMS}
}
