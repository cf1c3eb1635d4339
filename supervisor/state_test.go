package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/kha-supervisor/kha-supervisor/group"
)

func TestLifecycleTable(t *testing.T) {
	cases := []struct {
		from, to group.State
		want     bool
	}{
		{group.Starting, group.Standby, true},
		{group.Starting, group.Promoting, false}, // never campaign before registering
		{group.Standby, group.Promoting, true},
		{group.Standby, group.Active, false},  // the barrier and the start come first
		{group.Standby, group.Fencing, false}, // a standby holds nothing to fence
		{group.Promoting, group.Active, true},
		{group.Promoting, group.Fencing, true},
		{group.Promoting, group.Standby, false}, // a promotion is undone through demoting
		{group.Active, group.Demoting, true},
		{group.Active, group.Standby, false}, // units must be confirmed stopped first
		{group.Active, group.Fencing, true},
		{group.Demoting, group.Standby, true},
		{group.Demoting, group.Fencing, true},
		{group.Demoting, group.Active, false},
		{group.Fencing, group.Standby, false}, // a fencing process never comes back
		{group.Fencing, group.Promoting, false},
		{group.Stopped, group.Standby, false},
	}
	for _, c := range cases {
		if got := allowed(c.from, c.to); got != c.want {
			t.Errorf("allowed(%s, %s) = %v, want %v", c.from, c.to, got, c.want)
		}
	}
	// Terminal states have no way out.
	for _, s := range []group.State{group.Fencing, group.Stopped, group.Fenced, group.UnitsDown} {
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
	case e := <-s.in.jobDone:
		return s.onJobDone(bg, e)
	case <-time.After(20 * time.Second):
		t.Fatalf("job %s did not end", s.jobs.cur.kind.name)
		return nil, false
	}
}

// Every transition step and the job handlers take, each driven from the
// state it runs in (without etcd: see newOffline), is an edge of the
// lifecycle table; and every edge of the table is taken by one of them. The
// real-etcd tests assert the same at run time (the harness fails a test
// whose members counted a BadTransition).
func TestEveryEdgeTakenIsInTheTable(t *testing.T) {
	won := outcome[acquireResult]{val: acquireResult{won: true, member: 7, lease: lease{id: 9, sent: deadlineNow(), ttl: 10 * time.Second}, token: 42}}
	registered := outcome[registration]{val: registration{lease: lease{id: 7, sent: deadlineNow(), ttl: 10 * time.Second}}}
	cases := []struct {
		name  string
		from  group.State
		drive func(t *testing.T, s *Supervisor, bg context.Context)
		want  group.State
	}{
		{"registered", group.Starting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.startupDone(bg, registered) }, group.Standby},
		{"start-up failed: retried in place", group.Starting, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.startupDone(bg, outcome[registration]{err: errors.New("etcd down")})
		}, group.Starting},
		{"left before registering", group.Starting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.leaveDone(bg, outcome[struct{}]{}) }, group.Stopped},
		{"member lease lost", group.Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.loop.memberLease = 0; s.step(bg) }, group.Starting},
		{"lost the campaign", group.Standby, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.acquireDone(bg, outcome[acquireResult]{val: acquireResult{leader: group.LeaderInfo{Node: "m2", Token: 5, Lease: 3}}})
		}, group.Standby},
		{"elected", group.Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.acquireDone(bg, won) }, group.Promoting},
		{"left from standby", group.Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.leaveDone(bg, outcome[struct{}]{}) }, group.Stopped},
		{"units started", group.Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) { s.promoteDone(bg, outcome[*promotionSteps]{}) }, group.Active},
		{"promotion failed", group.Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.promoteDone(bg, outcome[*promotionSteps]{err: errors.New("barrier")})
		}, group.Demoting},
		{"fenced while promoting", group.Promoting, func(_ *testing.T, s *Supervisor, bg context.Context) { _ = s.fence(bg, "deadline", "test") }, group.Fencing},
		{"banned", group.Active, func(_ *testing.T, s *Supervisor, bg context.Context) {
			s.seen.ctl.Bans = map[string]group.Ban{"m1": {}}
			s.step(bg)
		}, group.Demoting},
		{"fenced while active", group.Active, func(_ *testing.T, s *Supervisor, bg context.Context) { _ = s.fence(bg, "key_lost", "test") }, group.Fencing},
		{"released", group.Demoting, func(t *testing.T, s *Supervisor, bg context.Context) { s.demoteDone(bg, outcome[struct{}]{}) }, group.Standby},
		{"released on shutdown, then left", group.Demoting, func(t *testing.T, s *Supervisor, bg context.Context) {
			s.loop.shutting = true
			s.demoteDone(bg, outcome[struct{}]{})
			if _, exit := finishJob(t, s, bg); !exit {
				t.Fatal("Run would not return after leaving")
			}
		}, group.Stopped},
		{"units not confirmed stopped", group.Demoting, func(t *testing.T, s *Supervisor, bg context.Context) {
			if _, exit := s.demoteDone(bg, outcome[struct{}]{err: errors.New("stuck")}); !exit {
				t.Fatal("Run would not return after the fence")
			}
		}, group.Fencing},
		{"shut down while active", group.Active, func(_ *testing.T, s *Supervisor, bg context.Context) { s.loop.shutting = true; s.step(bg) }, group.Demoting},
		{"elected during shutdown", group.Standby, func(_ *testing.T, s *Supervisor, bg context.Context) { s.loop.shutting = true; s.acquireDone(bg, won) }, group.Demoting},
	}
	taken := map[[2]group.State]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, bg := newOffline(t, nil)
			var seen []Transition
			s.opts.Observer = func(tr Transition) { seen = append(seen, tr) }
			s.loop.state, s.loop.memberLease = c.from, 7
			if c.from.Holding() {
				s.term.elecLease, s.term.token = 9, 42
			}
			c.drive(t, s, bg)
			if s.loop.state != c.want {
				t.Fatalf("state %s, want %s", s.loop.state, c.want)
			}
			if n := s.BadTransitions(); n != 0 {
				t.Fatalf("%d transitions not in the table: %+v", n, seen)
			}
			for _, tr := range seen {
				taken[[2]group.State{tr.From, tr.To}] = true
			}
		})
	}
	for from, tos := range lifecycle {
		for _, to := range tos {
			// Same-state edges are a change of reason only; the handlers
			// above keep their state without a transition.
			if from != to && !taken[[2]group.State{from, to}] {
				t.Errorf("table edge %s -> %s is taken by none of the cases", from, to)
			}
		}
	}
}

// A win whose member lease the renewer dropped during the campaign (etcd
// answered NotFound while the grant and the campaign were in flight): the
// record the promotion must write rides on that lease, so promoting could
// only fail and cool down. The win is given back at once and the loop
// registers again, as a win during shutdown is given back.
func TestWinAfterTheMemberLeaseWasDroppedIsGivenBack(t *testing.T) {
	s, _, bg := newOffline(t, nil)
	var seen []Transition
	s.opts.Observer = func(tr Transition) { seen = append(seen, tr) }
	s.loop.state, s.loop.memberLease = group.Standby, 7
	s.dropMemberLease() // the renewer's NotFound, while the campaign ran
	s.acquireDone(bg, outcome[acquireResult]{val: acquireResult{won: true, member: 7, lease: lease{id: 9, sent: deadlineNow(), ttl: 10 * time.Second}, token: 42}})
	if s.loop.state != group.Demoting {
		t.Fatalf("state %s after a win on a dropped member lease, want demoting (transitions %+v)", s.loop.state, seen)
	}
	if last := seen[len(seen)-1]; last.Kind != "member_lease_lost" {
		t.Errorf("demoted as %q, want member_lease_lost", last.Kind)
	}
	if s.jobs.cur == nil || s.jobs.cur.kind != jobDemote {
		t.Fatalf("job after the win: %+v, want the demotion releasing the key", s.jobs.cur)
	}
	finishJob(t, s, bg)
	if s.loop.state != group.Standby {
		t.Fatalf("state %s after the release, want standby", s.loop.state)
	}
	s.step(bg)
	if s.loop.state != group.Starting {
		t.Fatalf("state %s after the release, want starting (registering again)", s.loop.state)
	}
}

// The renewer's NotFound for the member lease is already queued when the
// win arrives (Run's select picks either ready channel): read after the
// promotion began, it would fence a node that started nothing; read first,
// while still standby, it gives the win back as above.
func TestQueuedMemberLeaseLossIsReadBeforeTheWin(t *testing.T) {
	s, _, bg := newOffline(t, nil)
	s.loop.state, s.loop.memberLease = group.Standby, 7
	s.in.renewals <- renewal{name: memberLease, lease: 7, sent: deadlineNow(), err: rpctypes.ErrLeaseNotFound}
	s.acquireDone(bg, outcome[acquireResult]{val: acquireResult{won: true, member: 7, lease: lease{id: 9, sent: deadlineNow(), ttl: 10 * time.Second}, token: 42}})
	if s.loop.fenceNow != "" {
		t.Fatalf("the queued NotFound was read after the win: fence %q (%s)", s.loop.fenceNow, s.loop.fenceKind)
	}
	if s.loop.state != group.Demoting {
		t.Fatalf("state %s, want demoting (the win given back)", s.loop.state)
	}
}
