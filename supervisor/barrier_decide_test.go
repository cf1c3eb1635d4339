package supervisor

import (
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// decideBarrier is a pure function of one view and the time: the table
// covers each reason to wait and each way through.
func TestDecideBarrier(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	blind := 5 * time.Second
	prev := holderMark{Node: "m1", Lease: 0x10, Token: 7, Seen: t0}
	stopped, running := &group.Record{Node: "m1"}, &group.Record{Node: "m1", UnitsRunning: true}
	cases := []struct {
		name  string
		now   time.Time
		v     barrierView
		pass  bool
		until time.Time
	}{
		{"another record says running", t0, barrierView{Self: "m2", Blockers: []string{"m3"}}, false, time.Time{}},
		{"no previous holder", t0, barrierView{Self: "m2"}, true, time.Time{}},
		{"previous holder is our earlier incarnation", t0, barrierView{Self: "m1", Prev: prev}, true, time.Time{}},
		{"lease alive, record stopped", t0, barrierView{Self: "m2", Prev: prev, PrevLeaseAlive: true, PrevRecord: stopped}, false, time.Time{}},
		{"lease alive, no record", t0, barrierView{Self: "m2", Prev: prev, PrevLeaseAlive: true}, false, time.Time{}},
		{"lease gone, record running", t0, barrierView{Self: "m2", Prev: prev, PrevRecord: running}, false, time.Time{}},
		{"lease gone, record stopped", t0, barrierView{Self: "m2", Prev: prev, PrevRecord: stopped}, true, time.Time{}},
		{"neither, not yet timed", t0, barrierView{Self: "m2", Prev: prev}, false, time.Time{}},
		{"neither, just gone", t0.Add(time.Second), barrierView{Self: "m2", Prev: prev, GoneAt: t0}, false, t0.Add(blind)},
		{"neither, a lease later", t0.Add(blind), barrierView{Self: "m2", Prev: prev, GoneAt: t0}, true, time.Time{}},
		{"neither, proven down earlier", t0.Add(2 * time.Second), barrierView{Self: "m2", Prev: prev, GoneAt: t0, DownBy: t0.Add(2 * time.Second)}, true, time.Time{}},
		{"neither, proof not yet due", t0.Add(time.Second), barrierView{Self: "m2", Prev: prev, GoneAt: t0, DownBy: t0.Add(2 * time.Second)}, false, t0.Add(2 * time.Second)},
		{"lease alive but holder past its fence instant", t0.Add(3 * time.Second), barrierView{Self: "m2", Prev: prev, PrevLeaseAlive: true, PrevRecord: running, DownBy: t0.Add(2 * time.Second)}, true, time.Time{}},
		{"blockers win over a proof", t0.Add(3 * time.Second), barrierView{Self: "m2", Prev: prev, Blockers: []string{"m1"}, DownBy: t0}, false, time.Time{}},
		{"never saw a holder, just started", t0.Add(time.Second), barrierView{Self: "m2", Prev: holderMark{Unknown: true, Seen: t0}}, false, t0.Add(blind)},
		{"never saw a holder, a lease later", t0.Add(blind), barrierView{Self: "m2", Prev: holderMark{Unknown: true, Seen: t0}}, true, time.Time{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := decideBarrier(c.now, c.v, blind)
			if d.Pass != c.pass || !d.Until.Equal(c.until) || d.Why == "" {
				t.Fatalf("got %+v, want pass %v until %v (with a reason)", d, c.pass, c.until)
			}
		})
	}
}

// leaseProof admits only a lease so close to expiry that its holder was
// already past its fence instant when it was read.
func TestLeaseProof(t *testing.T) {
	s := &Supervisor{}
	s.window.TTL, s.window.StopMax, s.window.Slack, s.window.ClockRate = 4*time.Second, 1500*time.Millisecond, 500*time.Millisecond, 0.01
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		left time.Duration
		ok   bool
	}{{-1, false}, {0, true}, {time.Second, true}, {2 * time.Second, false}, {3 * time.Second, false}} {
		by, ok := s.leaseProof(c.left, at, "m1")
		if ok != c.ok {
			t.Fatalf("remaining %s: proof %v, want %v", c.left, ok, c.ok)
		}
		if ok && by.Before(at.Add(c.left+time.Second)) {
			t.Fatalf("remaining %s: down by %s, before the lease's latest expiry", c.left, by)
		}
	}
}
