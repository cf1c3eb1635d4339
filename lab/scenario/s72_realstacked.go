package scenario

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenarios 72 and 73 (real plane, stacked etcd layout; issue 22 item 2's
// stacked variant): scenario 66's burst and rack cut, healed the moment
// the other master acts, on a lab whose masters each have an etcd member
// in their rack as their apiserver's only member (`kha-lab up --plane real
// --etcd-layout stacked`). The cut takes the leader away together with its
// member, so its apiserver's writes no longer wait in the apiserver's own
// sockets (separate layout) but in that member:
//
//   - 72: the cut member is the raft leader. It appends its apiserver's
//     proposals to its log and sends them to followers it cannot reach,
//     until CheckQuorum makes it step down (one election timeout, 1 s);
//     the other two elect a leader of their own, whose term overrides
//     the cut member's uncommitted entries at the heal.
//   - 73: e3, the third site, is the raft leader and the cut member a
//     follower. It forwards its apiserver's proposals to a leader it can
//     no longer reach, until its election timer fires; the frames wait in
//     the kernel's buffers of the peer connection, to be delivered at the
//     heal unless the leader's end gave the stream up first (rafthttp:
//     5 s without a frame).
//
// Judged at etcd as every trial: a write of the old term committed after
// the new term's first write is a late commit and fails the trial.
// stackedHealBy is the latest heal: later than scenario 66's 9 s, because
// a cut that takes the raft leader away delays the takeover by about an
// election timeout more (the new raft leader renews every lease for its
// TTL plus an election timeout: etcd's lessor Promote), and what holds the
// old term's proposals here is the cut member, not the apiserver's TCP
// connections and their 10 s user timeout (first trial of 72, kha-fast:
// the other master acted 10.4 s after the cut).
const stackedHealBy = 20 * time.Second

// raftSettle is how long after a leadership transfer a trial's fault may
// come: past an election timeout (1 s) and every holder's next renewal.
const raftSettle = 3 * time.Second

func init() {
	for _, v := range []struct {
		id         int
		name, lead string
		raftLeader func(t *plane.Trial) string
	}{
		{72, "real, stacked etcd: rack cut during a burst, the cut member the raft leader, healed at the other master's first act",
			"the leader's etcd member (in its rack) made the raft leader",
			func(t *plane.Trial) string { return t.R.P.Lab.StackedMember(t.Leader) }},
		{73, "real, stacked etcd: rack cut during a burst, the cut member a follower, healed at the other master's first act",
			"e3 (the third site) made the raft leader",
			func(*plane.Trial) string { return "e3" }},
	} {
		s := &burstTrial{healOnTakeover: true, healBy: stackedHealBy}
		prepare := withRaftLeader(s, v.raftLeader, func(t *plane.Trial) string { return t.R.P.Lab.StackedMember(t.Leader) })
		registerReal(plane.Spec{ID: v.id, Layout: lab.LayoutStacked, Name: v.name,
			Fault: fmt.Sprintf("%s; a ReplicaSet scaled 0 -> %d, the scheduler leader's rack (its etcd member with it) cut %s later and healed when the other master acts (at the latest %s after the cut)",
				v.lead, burstPods, burstLead, stackedHealBy),
			Prepare: prepare, Inject: s.inject, Judge: s.judge})
	}
}

// withRaftLeader is s.prepare with etcd's raft leadership moved first to
// the member raftLeader names, settled before the fault and checked again
// there; cutMember names the member the cut takes away, for the notes.
// The transfer comes first and well before the fault: while it runs the
// members drop proposals, and the new raft leader extends every lease
// (etcd's lessor Promote) until the holders renew; neither may fall into
// the judged window.
func withRaftLeader(s *burstTrial, raftLeader, cutMember func(t *plane.Trial) string) func(context.Context, *plane.Trial) error {
	return func(ctx context.Context, t *plane.Trial) error {
		to := raftLeader(t)
		if err := t.R.P.Lab.Etcd.MoveLeader(ctx, to); err != nil {
			return err
		}
		moved := time.Now()
		if err := s.prepare(ctx, t); err != nil {
			return err
		}
		if err := Sleep(ctx, time.Until(moved.Add(raftSettle))); err != nil {
			return err
		}
		if now, err := t.R.P.EtcdLeader(ctx); err != nil || now != to {
			return fmt.Errorf("etcd raft leader moved to %s, but %q leads at the fault (%v)", to, now, err)
		}
		t.Notef("etcd raft leader %s, the cut member %s", to, cutMember(t))
		return nil
	}
}
