package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestLifecycleTable(t *testing.T) {
	cases := []struct {
		from, to State
		want     bool
	}{
		{Starting, Standby, true},
		{Starting, Promoting, false}, // never campaign before registering
		{Standby, Promoting, true},
		{Standby, Active, false},  // the barrier and the start come first
		{Standby, Fencing, false}, // a standby holds nothing to fence
		{Promoting, Active, true},
		{Promoting, Fencing, true},
		{Promoting, Standby, false}, // a promotion is undone through demoting
		{Active, Demoting, true},
		{Active, Standby, false}, // units must be confirmed stopped first
		{Active, Fencing, true},
		{Demoting, Standby, true},
		{Demoting, Fencing, true},
		{Demoting, Active, false},
		{Fencing, Standby, false}, // a fencing process never comes back
		{Fencing, Promoting, false},
		{Stopped, Standby, false},
	}
	for _, c := range cases {
		if got := allowed(c.from, c.to); got != c.want {
			t.Errorf("allowed(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	// Terminal states have no way out.
	for _, s := range []State{Fencing, Stopped, Fenced, UnitsDown} {
		if len(lifecycle[s]) != 0 {
			t.Errorf("%s has outgoing edges %v", s, lifecycle[s])
		}
	}
}

// finishJob waits for the job a handler started and hands it to the loop's
// onJobDone, as Run would.
func finishJob(t *testing.T, s *Supervisor, bg context.Context) (error, bool) {
	t.Helper()
	select {
	case e := <-s.jobDone:
		return s.onJobDone(bg, e)
	case <-time.After(20 * time.Second):
		t.Fatalf("job %s did not end", s.job.kind.name)
		return nil, false
	}
}

// Every transition step and the job handlers take, each driven from the
// state it runs in (without etcd: see newOffline), is an edge of the
// lifecycle table; and every edge of the table is taken by one of them. The
// real-etcd tests assert the same at run time (the harness fails a test
// whose members counted a BadTransition).
func TestEveryEdgeTakenIsInTheTable(t *testing.T) {
	won := outcome[acquireResult]{val: acquireResult{won: true, lease: lease{id: 9, sent: deadlineNow(), ttl: 10 * time.Second}, token: 42}}
	registered := outcome[registration]{val: registration{lease: lease{id: 7, sent: deadlineNow(), ttl: 10 * time.Second}}}
	cases := []struct {
		name  string
		from  State
		drive func(t *testing.T, s *Supervisor, bg context.Context)
		want  State
	}{
		{"registered", Starting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.startupDone(bg, registered) }, Standby},
		{"start-up failed: retried in place", Starting, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.startupDone(bg, outcome[registration]{err: errors.New("etcd down")})
		}, Starting},
		{"left before registering", Starting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.leaveDone(bg, outcome[struct{}]{}) }, Stopped},
		{"member lease lost", Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.memberLease = 0; s.step(bg) }, Starting},
		{"lost the campaign", Standby, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.acquireDone(bg, outcome[acquireResult]{val: acquireResult{leader: LeaderInfo{Node: "m2", Token: 5, Lease: 3}}})
		}, Standby},
		{"elected", Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.acquireDone(bg, won) }, Promoting},
		{"left from standby", Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.leaveDone(bg, outcome[struct{}]{}) }, Stopped},
		{"units started", Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.promoteDone(bg, outcome[struct{}]{}) }, Active},
		{"promotion failed", Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.promoteDone(bg, outcome[struct{}]{err: errors.New("barrier")})
		}, Demoting},
		{"fenced while promoting", Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) { _ = s.fence(bg, "deadline", "test") }, Fencing},
		{"banned", Active, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.ctl.Bans = map[string]Ban{"m1": {}}
			s.step(bg)
		}, Demoting},
		{"fenced while active", Active, func(_ *testing.T, s *Supervisor, bg context.Context) { _ = s.fence(bg, "key_lost", "test") }, Fencing},
		{"released", Demoting, func(t *testing.T, s *Supervisor, bg context.Context) { s.demoteDone(bg, outcome[struct{}]{}) }, Standby},
		{"released on shutdown, then left", Demoting, func(t *testing.T, s *Supervisor, bg context.Context) {
			s.shutting = true
			s.demoteDone(bg, outcome[struct{}]{})
			if _, exit := finishJob(t, s, bg); !exit {
				t.Fatal("Run would not return after leaving")
			}
		}, Stopped},
		{"units not confirmed stopped", Demoting, func(t *testing.T, s *Supervisor, bg context.Context) {
			if _, exit := s.demoteDone(bg, outcome[struct{}]{err: errors.New("stuck")}); !exit {
				t.Fatal("Run would not return after the fence")
			}
		}, Fencing},
		{"shut down while active", Active, func(_ *testing.T, s *Supervisor, bg context.Context) { s.shutting = true; s.step(bg) }, Demoting},
		{"elected during shutdown", Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.shutting = true; s.acquireDone(bg, won) }, Demoting},
	}
	taken := map[[2]State]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, bg := newOffline(t, nil)
			var seen []Transition
			s.opts.Observer = func(tr Transition) { seen = append(seen, tr) }
			s.state, s.memberLease = c.from, 7
			if c.from.Holding() {
				s.elecLease, s.token = 9, 42
			}
			c.drive(t, s, bg)
			if s.state != c.want {
				t.Fatalf("state %s, want %s", s.state, c.want)
			}
			if n := s.BadTransitions(); n != 0 {
				t.Fatalf("%d transitions not in the table: %+v", n, seen)
			}
			for _, tr := range seen {
				taken[[2]State{tr.From, tr.To}] = true
			}
		})
	}
	for from, tos := range lifecycle {
		for _, to := range tos {
			// Same-state edges are a change of reason only; the handlers
			// above keep their state without a transition.
			if from != to && !taken[[2]State{from, to}] {
				t.Errorf("table edge %s -> %s is taken by none of the cases", from, to)
			}
		}
	}
}
