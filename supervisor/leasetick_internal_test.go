package supervisor

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leaseRead is one TimeToLive of the previous holder's election lease: sent
// and answered at our times, with etcd's whole seconds left.
type leaseRead struct {
	sent, at time.Duration // after t0
	left     time.Duration
}

// With a stop budget and slack under one second (fast-kill: 0.3 s + 0.5 s),
// no single read can prove the holder past its fence instant: etcd answers
// whole seconds, and "0 s left" may mean 0.99 s. Two reads can: the first
// that says 0 s bounds the expiry by its answer + 1 s; a later read sent
// when that bound is at most StopMax + slack away, still finding the lease
// with 0 s left (so not renewed in between), proves it. Issue 21: without
// it the fast-kill standby waited one full blind lease (6.05 s) after every
// rack cut.
func TestLeaseTickProof(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	s := &Supervisor{}
	s.window.TTL, s.window.StopMax, s.window.Slack, s.window.ClockRate = 5*time.Second, 300*time.Millisecond, 500*time.Millisecond, 0.01
	s.cfg.Units.PollInterval = 500 * time.Millisecond
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	pad := ms(50) // TTL * rho
	for _, c := range []struct {
		name  string
		reads []leaseRead
		want  time.Duration // 0: no proof
	}{
		{"one read with 0 s left proves nothing", []leaseRead{{0, ms(5), 0}}, 0},
		{"0 s left twice, the second sent too early", []leaseRead{{0, ms(5), 0}, {ms(100), ms(105), 0}}, 0},
		{"0 s left twice, the second late enough", []leaseRead{{0, ms(5), 0}, {ms(205), ms(210), 0}}, ms(1005) + pad},
		{"renewed in between", []leaseRead{{0, ms(5), 0}, {ms(100), ms(105), 4 * time.Second}, {ms(300), ms(305), 0}}, 0},
		{"renewed, then run down again", []leaseRead{{0, ms(5), 0}, {ms(100), ms(105), 4 * time.Second}, {ms(4100), ms(4105), 0}, {ms(4310), ms(4315), 0}}, ms(5105) + pad},
		{"reads too far apart to rule out a renewal", []leaseRead{{0, ms(5), 0}, {ms(4100), ms(4105), 0}}, 0},
		// A renewal 3.95 s before the second read leaves 1.05 s on our
		// clock but 0.97 s on an etcd clock 1% fast against ours 1% slow:
		// "0 s left" again. (TTL - 1 s) * (1 - 2 rho) = 3.92 s is the most.
		{"reads apart by more than TTL - 1 s less both clocks' error", []leaseRead{{0, ms(5), 0}, {ms(3945), ms(3950), 0}}, 0},
		{"reads apart by just under that", []leaseRead{{0, ms(5), 0}, {ms(3910), ms(3915), 0}}, ms(1005) + pad},
		{"1 s left, then 0 s twice", []leaseRead{{0, ms(5), time.Second}, {ms(100), ms(105), 0}, {ms(310), ms(315), 0}}, ms(1105) + pad},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w leaseWatch
			var got time.Time
			for _, r := range c.reads {
				if by := s.tickProof(&w, "m1", clientv3.LeaseID(0x10), r.left, 0, t0.Add(r.sent), t0.Add(r.at)); !by.IsZero() && (got.IsZero() || by.Before(got)) {
					got = by
				}
			}
			switch {
			case c.want == 0 && !got.IsZero():
				t.Fatalf("proof %s, want none", got.Sub(t0))
			case c.want != 0 && !got.Equal(t0.Add(c.want)):
				t.Fatalf("proof %v, want %s", got.Sub(t0), c.want)
			}
		})
	}
}
