package scenario

import (
	"fmt"
	"slices"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// Scenario 75 (real plane, issue 21): scenario 46's minority partition
// during scenario 66's burst, made so that the old term's writes have a
// way into etcd after the next term's first write. e3 is made the raft
// leader first; the scheduler leader's rack is then cut together with e1,
// a follower, from the other rack and e2 and e3, 150 ms into a burst of
// creates, and healed the moment the other master acts (at the latest
// stackedHealBy after the cut).
//
// The old master's apiserver still reaches e1, which forwards what it
// receives to the raft leader it can no longer reach; those frames wait in
// e1's peer connection, where no reset on the master reaches, and are
// appended and committed when the heal delivers them: a late commit, as in
// scenario 73 with a stacked member (46 kha-fast-kill #2 of 4 December's
// night run met it by chance). Without [etcd_fence] nothing on either
// master can refuse them; with it, the new leader's revoke of the old
// apiserver's etcd role changes the auth revision they were proposed
// under, and e3 refuses them at apply. Judged at etcd as every trial.
func init() {
	s := &burstTrial{healOnTakeover: true, healBy: stackedHealBy, cut: minorityCut}
	member := func(*plane.Trial) string { return minorityMember }
	prepare := withRaftLeader(s, func(*plane.Trial) string { return minorityRaftLeader }, member)
	registerReal(plane.Spec{ID: 75, Layout: lab.LayoutSeparate,
		Name: "real: minority partition during a burst, healed at the other master's first act",
		Fault: fmt.Sprintf("%s made the raft leader; a ReplicaSet scaled 0 -> %d, the scheduler leader's rack and %s (a follower) cut %s later from the other rack and the other two etcd members, healed when the other master acts (at the latest %s after the cut)",
			minorityRaftLeader, burstPods, minorityMember, burstLead, stackedHealBy),
		Prepare: prepare, Inject: s.inject, Judge: s.judge})
}

// minorityRaftLeader leads etcd at the fault and minorityMember goes with
// the old master: a follower, which forwards its proposals.
const minorityRaftLeader, minorityMember = "e3", "e1"

// minorityCut: the scheduler leader's rack and minorityMember on one side,
// the other rack and the other members on the other.
func minorityCut(t *plane.Trial) (a, b []string) {
	rack, rest := leaderRackCut(t)
	return append(slices.Clone(rack), minorityMember),
		slices.DeleteFunc(slices.Clone(rest), func(n string) bool { return n == minorityMember })
}
