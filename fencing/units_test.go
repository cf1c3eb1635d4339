package fencing

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var fast = Timeouts{Start: time.Second, Stop: 100 * time.Millisecond, KillGrace: 100 * time.Millisecond}

// StartAll starts every unit (together: the order between them is the
// service manager's, After= in systemd); StopAll stops them in reverse.
func TestStartAllStopAllReverse(t *testing.T) {
	m := NewMemory()
	units := []string{"a.service", "b.service", "c.service"}
	if err := StartAll(context.Background(), m, units, fast); err != nil {
		t.Fatal(err)
	}
	if err := StopAll(context.Background(), m, units, fast); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range m.Snapshot() {
		got = append(got, e.What+" "+e.Unit)
	}
	if len(got) != 6 {
		t.Fatalf("events %v, want three starts and three stops", got)
	}
	started := slices.Clone(got[:3])
	slices.Sort(started)
	want := []string{"started a.service", "started b.service", "started c.service", "stopped c.service", "stopped b.service", "stopped a.service"}
	if !slices.Equal(started, want[:3]) || !slices.Equal(got[3:], want[3:]) {
		t.Fatalf("events %v, want every unit started, then %v", got, want[3:])
	}
}

// StartAll starts every unit at once: one that fails does not keep the
// others from starting, and its error names it (the caller unwinds).
func TestStartAllReportsEachFailure(t *testing.T) {
	m := NewMemory()
	m.SetFailing("b.service", true)
	err := StartAll(context.Background(), m, []string{"a.service", "b.service", "c.service"}, fast)
	if err == nil || !strings.Contains(err.Error(), "start b.service") {
		t.Fatalf("err %v, want one naming b.service", err)
	}
	if !m.Running("a.service") || !m.Running("c.service") {
		t.Fatal("a and c must start although b failed")
	}
}

// queueRecorder is a QueuedStarter whose first unit is slow to be queued
// (the D-Bus round trip of a busy systemd); it records the queue's order.
type queueRecorder struct {
	*Memory
	mu    sync.Mutex
	order []string
}

func (q *queueRecorder) StartQueued(ctx context.Context, unit string, queued func()) error {
	if unit == "a.service" {
		time.Sleep(50 * time.Millisecond)
	}
	q.mu.Lock()
	q.order = append(q.order, unit)
	q.mu.Unlock()
	queued()
	return q.Start(ctx, unit)
}

// StartAll queues the start jobs in list order, so that systemd's After=
// between them holds, and only then waits for them together: a slow queue
// for the first unit does not let the second's job in ahead of it (lab CI
// found the second unit active first when both calls raced).
func TestStartAllQueuesInOrder(t *testing.T) {
	q := &queueRecorder{Memory: NewMemory()}
	units := []string{"a.service", "b.service", "c.service"}
	if err := StartAll(context.Background(), q, units, fast); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q.order, units) {
		t.Fatalf("start jobs queued in order %v, want %v", q.order, units)
	}
}

func TestFenceEscalatesToKill(t *testing.T) {
	m := NewMemory()
	units := []string{"a.service", "b.service"}
	_ = StartAll(context.Background(), m, units, fast)
	m.SetStubborn("b.service", true)
	if err := Fence(context.Background(), m, units, fast); err != nil {
		t.Fatal(err)
	}
	if m.Running("a.service") || m.Running("b.service") {
		t.Fatal("units still running after Fence")
	}
	var killed []string
	for _, e := range m.Snapshot() {
		if e.What == "killed" {
			killed = append(killed, e.Unit)
		}
	}
	if len(killed) != 1 || killed[0] != "b.service" {
		t.Fatalf("killed %v, want exactly b.service", killed)
	}
}

func TestUnitStateRunning(t *testing.T) {
	for state, want := range map[string]bool{"active": true, "activating": true, "deactivating": true, "reloading": true, "inactive": false, "failed": false} {
		if got := (UnitState{ActiveState: state}).Running(); got != want {
			t.Errorf("Running(%s) = %v, want %v", state, got, want)
		}
	}
}

// A fence squeezed for time (a second look late in the budget) still gets
// to SIGKILL: the graceful stop never takes all of what is left.
func TestFenceKeepsTimeForTheKill(t *testing.T) {
	m := NewMemory()
	m.StartBehindBack("a.service")
	m.SetHung(true) // the manager answers nothing: only the direct kill helps
	// Budgets in seconds, not milliseconds: the kill's share (what the
	// graceful stop leaves of the 2 s) must not be eaten by a loaded
	// machine's scheduling delays, which the test is not about.
	const budget = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	err := Fence(ctx, m, []string{"a.service"}, Timeouts{Stop: 10 * budget, KillGrace: 5 * budget})
	if err != nil || m.Running("a.service") || m.DirectKills() != 1 {
		t.Fatalf("Fence with %s left: %v, running %v, direct kills %d", budget, err, m.Running("a.service"), m.DirectKills())
	}
	if took := time.Since(start); took > budget+time.Second {
		t.Fatalf("Fence took %s of a %s budget", took, budget)
	}
}
