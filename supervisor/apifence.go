package supervisor

import "context"

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
	if r, ok := s.opts.APIFence.(APIFenceReporter); ok {
		st := r.APIFenceStatus()
		return &st
	}
	return nil
}
