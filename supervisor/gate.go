package supervisor

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

var errGateClosed = errors.New("unit starts are closed: this member no longer holds the lease")

// gate serialises unit starts against fencing. A start runs only while the
// gate is open, holding the gate's lock for the whole call; closing sets
// the flag first, then takes the lock, so once closeWait returns no start
// is in flight and none can begin: every stop issued afterwards is queued
// after the last start and replaces it.
type gate struct {
	mu     sync.Mutex
	closed atomic.Bool
}

func (g *gate) open() { g.closed.Store(false) }

// do runs fn if the gate is open.
func (g *gate) do(fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed.Load() {
		return errGateClosed
	}
	return fn()
}

// closeWait closes the gate and waits up to max for an in-flight start to
// return (its context has been cancelled, so it returns promptly). It
// reports whether the in-flight start, if any, has returned.
func (g *gate) closeWait(max time.Duration) bool {
	g.closed.Store(true)
	got := make(chan struct{})
	go func() {
		g.mu.Lock()
		g.mu.Unlock() //nolint:staticcheck // an empty critical section is the point: wait for do to return
		close(got)
	}()
	select {
	case <-got:
		return true
	case <-time.After(max):
		return false
	}
}
