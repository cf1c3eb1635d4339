package fencing

import (
	"testing"
	"time"
)

// TestTermOneFormula: a Term's figures are the Deadline's, and the lease
// outlasts the fence instant by exactly S_max + Window.Margin().
func TestTermOneFormula(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := Window{TTL: 10 * time.Second, ClockRate: 0.01, StopMax: 3 * time.Second, Slack: 500 * time.Millisecond, Watchdog: 2 * time.Second}
	d := NewDeadlineClock(w, IdentityClock{})
	d.Renewed("member", t0, 10*time.Second)
	d.Renewed("election", t0.Add(200*time.Millisecond), 10*time.Second)
	tm := d.Term(Term{Token: 7, Open: true})
	at, ok := tm.FenceAt()
	if want := t0.Add(w.Span(w.TTL)); !ok || !at.Equal(want) {
		t.Fatalf("FenceAt = %v %v, want the earliest lease's %v", at, ok, want)
	}
	for _, now := range []time.Time{t0, t0.Add(4 * time.Second), t0.Add(w.Span(w.TTL)), t0.Add(9 * time.Second)} {
		if got, want := tm.FenceIn(now), d.Left(now); got != want {
			t.Errorf("FenceIn(%v) = %v, Deadline.Left %v", now.Sub(t0), got, want)
		}
		if got, want := tm.LeaseLeft(now), d.LeaseLeft(now); got != want {
			t.Errorf("LeaseLeft(%v) = %v, Deadline.LeaseLeft %v", now.Sub(t0), got, want)
		}
		if got, want := tm.LeaseLeft(now)-tm.FenceIn(now), w.StopMax+w.Margin(); got != want {
			t.Errorf("LeaseLeft - FenceIn = %v, want S_max + Margin() = %v", got, want)
		}
	}
	// Renewals after the snapshot do not move it: it is immutable.
	d.Renewed("member", t0.Add(5*time.Second), 10*time.Second)
	d.Renewed("election", t0.Add(5*time.Second), 10*time.Second)
	if at2, _ := tm.FenceAt(); !at2.Equal(at) {
		t.Fatalf("the snapshot moved with the deadline: %v, was %v", at2, at)
	}
}

// TestTermMayAct: open, a token and the fence instant not come; the instant
// itself is closed. Nothing without a fence instant may act.
func TestTermMayAct(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := Window{TTL: 10 * time.Second, StopMax: 3 * time.Second, Slack: 500 * time.Millisecond}
	d := NewDeadlineClock(w, IdentityClock{})
	d.Renewed("election", t0, w.TTL)
	fenceAt := t0.Add(w.Span(w.TTL))
	open := d.Term(Term{State: "active", Token: 7, Open: true})
	for _, tc := range []struct {
		name string
		t    Term
		now  time.Time
		want bool
	}{
		{"open, well before", open, t0, true},
		{"open, 1ns before", open, fenceAt.Add(-time.Nanosecond), true},
		{"open, at the fence instant", open, fenceAt, false},
		// The guard's old threshold (lease left >= S_max) admitted starts
		// up to the margin after the fence instant.
		{"open, within the margin after it", open, fenceAt.Add(w.Margin()), false},
		{"closed", d.Term(Term{State: "promoting", Token: 7}), t0, false},
		{"no token", d.Term(Term{State: "active", Open: true}), t0, false},
		{"no fence instant", Term{State: "active", Token: 7, Open: true}, t0, false},
		{"zero", Term{}, t0, false},
	} {
		got := tc.t.MayAct(tc.now)
		if got != tc.want {
			t.Errorf("%s: MayAct = %v, want %v", tc.name, got, tc.want)
		}
		if why := tc.t.Closed(tc.now); (why == "") != tc.want {
			t.Errorf("%s: Closed = %q, MayAct %v", tc.name, why, tc.want)
		}
	}
}
