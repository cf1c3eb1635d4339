package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Memory is an in-memory Units for tests of the supervisor's logic. It
// records every transition with its wall-clock instant so a test can check
// that one node's units were down before another's came up. It is not a
// model of systemd; the real behaviour is tested against systemd itself.
type Memory struct {
	mu       sync.Mutex
	state    map[string]string
	restarts map[string]uint32
	stubborn map[string]bool // ignores graceful stop until killed
	failing  map[string]bool // start fails
	sub      map[string]string
	killed   map[string]chan struct{}
	hung     chan struct{} // non-nil: the service manager does not answer
	noDirect bool          // KillDirect cannot confirm
	direct   int           // KillDirect calls that killed something
	execs    map[string][]string
	binds    map[string]Binding
	stopped  map[string]bool // its processes stopped (SIGSTOP) until it is stopped or killed
	Events   []Event
}

// Event is one recorded transition.
type Event struct {
	At   time.Time
	Unit string
	What string // "started", "stopped", "killed", "failed"
}

// NewMemory returns a Memory with every unit inactive.
func NewMemory() *Memory {
	return &Memory{
		state:    map[string]string{},
		restarts: map[string]uint32{},
		stubborn: map[string]bool{},
		failing:  map[string]bool{},
		sub:      map[string]string{},
		killed:   map[string]chan struct{}{},
		stopped:  map[string]bool{},
	}
}

func (m *Memory) record(unit, what string) {
	m.Events = append(m.Events, Event{At: time.Now(), Unit: unit, What: what})
}

// SetHung makes the service manager stop answering (PID 1 or its bus
// hung): Start, Stop, Kill and States block until their ctx ends. The
// units' processes keep running.
func (m *Memory) SetHung(v bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case v && m.hung == nil:
		m.hung = make(chan struct{})
	case !v && m.hung != nil:
		close(m.hung)
		m.hung = nil
	}
}

// waitHung blocks while the manager is hung; it returns ctx's error if
// ctx ends first.
func (m *Memory) waitHung(ctx context.Context) error {
	m.mu.Lock()
	ch := m.hung
	m.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start implements Units.
func (m *Memory) Start(ctx context.Context, unit string) error {
	if err := m.waitHung(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.failing[unit] {
		m.state[unit] = "failed"
		m.record(unit, "failed")
		return fmt.Errorf("unit %s failed to start", unit)
	}
	if m.state[unit] != "active" {
		m.state[unit] = "active"
		m.record(unit, "started")
	}
	return nil
}

// Stop implements Units. A stubborn unit blocks until Kill or ctx expiry.
func (m *Memory) Stop(ctx context.Context, unit string) error {
	if err := m.waitHung(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	if m.stubborn[unit] && m.state[unit] == "active" {
		ch := m.killed[unit]
		if ch == nil {
			ch = make(chan struct{})
			m.killed[unit] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	if m.state[unit] == "active" || m.state[unit] == "deactivating" || m.state[unit] == "activating" {
		m.state[unit] = "inactive"
		delete(m.sub, unit)
		delete(m.stopped, unit)
		m.record(unit, "stopped")
	}
	return nil
}

// Kill implements Units.
func (m *Memory) Kill(ctx context.Context, unit string) error {
	if err := m.waitHung(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.stopped, unit)
	if m.state[unit] == "active" {
		m.state[unit] = "inactive"
		m.record(unit, "killed")
	}
	if ch := m.killed[unit]; ch != nil {
		close(ch)
		delete(m.killed, unit)
	}
	return nil
}

// States implements Units.
func (m *Memory) States(ctx context.Context, units []string) ([]UnitState, error) {
	if err := m.waitHung(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]UnitState, 0, len(units))
	for _, u := range units {
		s := m.state[u]
		if s == "" {
			s = "inactive"
		}
		out = append(out, UnitState{Name: u, ActiveState: s, SubState: m.sub[u], NRestarts: m.restarts[u]})
	}
	return out, nil
}

// SetStubborn makes unit ignore graceful stops (like a process ignoring
// SIGTERM) until it is killed.
func (m *Memory) SetStubborn(unit string, v bool) { m.mu.Lock(); m.stubborn[unit] = v; m.mu.Unlock() }

var _ StopReader = (*Memory)(nil)

// SetStopped makes unit's processes stopped, as SIGSTOP does, until the
// unit is stopped or killed (StopReader).
func (m *Memory) SetStopped(unit string, v bool) { m.mu.Lock(); m.stopped[unit] = v; m.mu.Unlock() }

// Stopped implements StopReader: a running unit marked with SetStopped.
func (m *Memory) Stopped(unit string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped[unit] && m.state[unit] == "active", nil
}

// SetFailing makes starts of unit fail.
func (m *Memory) SetFailing(unit string, v bool) { m.mu.Lock(); m.failing[unit] = v; m.mu.Unlock() }

// Crash marks a running unit failed, as systemd does when its main process
// dies, and counts a restart.
func (m *Memory) Crash(unit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state[unit] = "failed"
	m.restarts[unit]++
	m.record(unit, "failed")
}

// StartBehindBack starts unit as an operator would, bypassing the supervisor.
func (m *Memory) StartBehindBack(unit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state[unit] = "active"
	m.record(unit, "started")
}

// StartPreBehindBack puts unit where an operator's start leaves it while
// its ExecStartPre= (the guard) runs: activating, sub-state start-pre.
func (m *Memory) StartPreBehindBack(unit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.state[unit] = "activating"
	m.sub[unit] = "start-pre"
	m.record(unit, "start-pre")
}

// Running reports whether unit is currently active.
func (m *Memory) Running(unit string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state[unit] == "active"
}

// Snapshot returns a copy of the recorded events.
func (m *Memory) Snapshot() []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Event(nil), m.Events...)
}

// KillDirect stands in for killing a unit's processes from its cgroup,
// without the service manager: it works while the manager is hung, unless
// SetDirectFails says the kill cannot be confirmed.
func (m *Memory) KillDirect(ctx context.Context, unit string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.noDirect {
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
		return fmt.Errorf("memory: %s not confirmed gone: %w", unit, ctx.Err())
	}
	if m.state[unit] != "inactive" && m.state[unit] != "failed" && m.state[unit] != "" {
		m.state[unit] = "inactive"
		m.direct++
		m.record(unit, "killed")
	}
	return nil
}

// SetDirectFails makes KillDirect unable to confirm (it waits for ctx).
func (m *Memory) SetDirectFails(v bool) { m.mu.Lock(); m.noDirect = v; m.mu.Unlock() }

// DirectKills counts units KillDirect took down.
func (m *Memory) DirectKills() int { m.mu.Lock(); defer m.mu.Unlock(); return m.direct }

// SetExecutables says which executables unit runs (as ExecStart= would).
func (m *Memory) SetExecutables(unit string, paths ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.execs == nil {
		m.execs = map[string][]string{}
	}
	m.execs[unit] = paths
}

// Executables implements ExecReader with what SetExecutables said.
func (m *Memory) Executables(ctx context.Context, units []string) (map[string][]string, error) {
	if err := m.waitHung(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for _, u := range units {
		out[u] = append([]string(nil), m.execs[u]...)
	}
	return out, nil
}

// SetBinding makes Bindings report b for b.Unit (units never set are not
// reported, so they are not checked).
func (m *Memory) SetBinding(b Binding) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.binds == nil {
		m.binds = map[string]Binding{}
	}
	m.binds[b.Unit] = b
}

// Bindings implements BindingReader with what SetBinding said.
func (m *Memory) Bindings(ctx context.Context, units []string) (map[string]Binding, error) {
	if err := m.waitHung(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Binding{}
	for _, u := range units {
		if b, ok := m.binds[u]; ok {
			out[u] = b
		}
	}
	return out, nil
}
