package scenario

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// All is the failure matrix of the design brief, section 8, in order.
var All = []Scenario{
	{1, "leader-rack-isolated", "leader's rack cut off from etcd and from the other rack",
		"leader fences before its lease can expire; other node takes over ~TTL later", leaderRackIsolated, CI | Soak, nil},
	{2, "standby-rack-isolated", "standby's rack cut off",
		"nothing changes on the leader; standby rejoins on heal", standbyRackIsolated, Soak, nil},
	{3, "leader-etcd-cut", "leader cut off from etcd only (still sees the other rack)",
		"as 1", leaderEtcdCut, Soak, nil},
	{4, "kill-supervisor", "kill -9 of the leader's supervisor",
		"units stop at once (BindsTo); takeover after TTL", killSupervisor, CI | Soak, nil},
	{5, "freeze-supervisor", "SIGSTOP of the leader's supervisor for longer than TTL",
		"systemd watchdog kills it; units stop; takeover", freezeSupervisor, CI | Soak, nil},
	{6, "etcd-member-down", "one etcd member down (the raft leader, kill -9)",
		"no leadership change", etcdMemberDown, Soak, nil},
	{7, "etcd-quorum-lost", "etcd quorum lost (two members killed), then restored",
		"leader fences; no node runs units; one takes over after restore", quorumLost, Soak, nil},
	{8, "unit-ignores-term", "managed unit ignores SIGTERM (leader then cut from etcd)",
		"fencing escalates to SIGKILL within S_max", unitIgnoresTerm, Soak, nil},
	{9, "manual-start-standby", "operator runs `systemctl start kube-scheduler` on the standby",
		"refused by the guard with a message naming the leader", manualStart, CI | Soak, nil},
	{10, "manual-start-no-guard", "same, with the guard drop-in removed",
		"the standby supervisor stops the unit within one poll", manualStartNoGuard, Alone, nil},
	{11, "key-deleted-lease-revoked", "election key deleted by hand, then the new leader's lease revoked by hand",
		"old leader fences at once; new leader waits for it (barrier)", keyDeleted, Soak, nil},
	{12, "unit-crash-loop", "managed unit crash-loops on the leader",
		"leader demotes; other node takes over", crashLoop, Soak, nil},
	{13, "graceful-stop", "`systemctl stop kha-supervisor` on the leader",
		"handoff well under one second", gracefulStop, CI | Soak, nil},
	{14, "simultaneous-start", "both supervisors start at the same instant",
		"exactly one leader", simultaneousStart, Soak, nil},
	{15, "systemd-reexec", "systemd daemon-reexec, then a dbus restart, on the leader",
		"supervisor reconnects; no spurious fence", systemdReexec, Soak, nil},
}

// Lookup returns the scenario with id.
func Lookup(id int) (Scenario, bool) {
	for _, s := range Tables() {
		if s.ID == id {
			return s, true
		}
	}
	return Scenario{}, false
}

const scheduler = "kube-scheduler"

func witnessOf(unit string) master.Witness { return master.Witness{Unit: unit} }

// cut partitions rack of a from etcd (and from b's rack when b != "").
func (r *Run) cutFromEtcd(ctx context.Context, node string, alsoFrom string) error {
	if err := r.Lab.Topo.CutRacks(ctx, r.RackOf(node), "etcd"); err != nil {
		return err
	}
	if alsoFrom != "" {
		return r.Lab.Topo.CutRacks(ctx, r.RackOf(node), r.RackOf(alsoFrom))
	}
	return nil
}

// expectStoppedBeforeWin checks the core property directly (the overlap
// check covers it too): the old leader's units were gone before the new
// leader won.
func (r *Run) expectStoppedBeforeWin() {
	m, ok := r.Res.Metrics[report.MMargin]
	if !ok {
		r.Failf("no margin measured (old units' last heartbeat or the win not seen)")
		return
	}
	if m <= 0 {
		r.Failf("old leader's units beat %.1f ms AFTER the new leader won", -m)
	}
}
