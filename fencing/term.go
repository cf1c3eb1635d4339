package fencing

import (
	"fmt"
	"time"
)

// Term is one immutable snapshot of this node's current term, as the
// supervisor's loop last published it. It is the one answer to "may this
// node act now?": the guard (a unit's start), the API fence's gates (a
// request's departure), the member record, status and the metrics all read
// it, and all measure the time left with the Deadline's formula on the fence
// clock (see MayAct).
//
// The zero Term is closed: no token, no fence instant.
type Term struct {
	// Who and where, for the readers' messages.
	Node, Cluster string
	State         string // the lifecycle state (standby, promoting, active, ...)
	Leader        string // the leader as this node last saw it; "" when none is known
	LeaderToken   int64  // the leader's fencing token; 0 when unknown

	// Token is this node's fencing token (its election key's revision)
	// while it holds the key; 0 otherwise.
	Token int64
	// Open is the loop's verdict without the clock: this node holds the
	// key, is promoting (past its barrier, takeover delay and the token's
	// destinations) or active, and no fence or demotion has closed the
	// starts. MayAct adds the clock.
	Open bool
	// StopMax is S_max, what stopping every unit may take.
	StopMax time.Duration

	fenceAt time.Time     // the fence instant on clock; zero: none (not holding)
	lapse   time.Duration // fence instant to the lease's guaranteed end: S_max + Window.Margin()
	clock   Clock
}

// Term returns t with this deadline's fence instant (the earliest over its
// leases, on its clock) as the term's. Without a tracked lease t keeps none,
// and reads as expired.
func (d *Deadline) Term(t Term) Term {
	t.fenceAt, t.lapse, t.clock = time.Time{}, d.w.StopMax+d.w.Margin(), d.clock
	if at, ok := d.at(); ok {
		t.fenceAt = at
	}
	return t
}

// FenceAt is the fence instant on the fence clock; ok is false when the
// term has none (the node holds no lease that lets it act).
func (t Term) FenceAt() (at time.Time, ok bool) { return t.fenceAt, !t.fenceAt.IsZero() }

// FenceIn is how long until the fence instant as seen at now, a time.Now()
// reading (negative once passed; zero without a fence instant).
func (t Term) FenceIn(now time.Time) time.Duration {
	if t.fenceAt.IsZero() {
		return 0
	}
	return left(t.fenceAt, 0, t.clock, now)
}

// LeaseLeft is how long the lease itself is still guaranteed valid at now:
// FenceIn + S_max + Window.Margin() (zero without a fence instant).
func (t Term) LeaseLeft(now time.Time) time.Duration {
	if t.fenceAt.IsZero() {
		return 0
	}
	return left(t.fenceAt, t.lapse, t.clock, now)
}

// MayAct is the one predicate: the term is open, has a token, and its fence
// instant has not come. A unit started (or a request sent) while it holds
// is stopped by the fence that begins at the fence instant at the latest,
// within S_max, so before the lease could lapse with the margin to
// spare.
func (t Term) MayAct(now time.Time) bool { return t.Closed(now) == "" }

// Closed says why the term may not act at now; "" when it may.
func (t Term) Closed(now time.Time) string {
	switch {
	case t.Token == 0:
		return fmt.Sprintf("this node is %s; leader is %s (token %d)", orNone(t.State), orNone(t.Leader), t.LeaderToken)
	case !t.Open:
		return fmt.Sprintf("this node is %s and units may not run now", orNone(t.State))
	case t.FenceIn(now) <= 0:
		return "the fence deadline has passed"
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// left is at + extra - now with now mapped onto c (rounded towards later):
// the Deadline's one formula for time left, which Term shares.
func left(at time.Time, extra time.Duration, c Clock, now time.Time) time.Duration {
	return at.Add(extra).Sub(c.Present(now))
}
