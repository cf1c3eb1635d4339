package scenario

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

// All is the failure matrix of the design brief, section 8, in order.
var All = []Scenario{
	{1, "leader-rack-isolated", "leader's rack cut off from etcd and from the other rack",
		"leader fences before its lease can expire; other node takes over ~TTL later", leaderRackIsolated, CI | Soak},
	{2, "standby-rack-isolated", "standby's rack cut off",
		"nothing changes on the leader; standby rejoins on heal", standbyRackIsolated, Soak},
	{3, "leader-etcd-cut", "leader cut off from etcd only (still sees the other rack)",
		"as 1", leaderEtcdCut, Soak},
	{4, "kill-supervisor", "kill -9 of the leader's supervisor",
		"units stop at once (BindsTo); takeover after TTL", killSupervisor, CI | Soak},
	{5, "freeze-supervisor", "SIGSTOP of the leader's supervisor for longer than TTL",
		"systemd watchdog kills it; units stop; takeover", freezeSupervisor, CI | Soak},
	{6, "etcd-member-down", "one etcd member down (the raft leader, kill -9)",
		"no leadership change", etcdMemberDown, Soak},
	{7, "etcd-quorum-lost", "etcd quorum lost (two members killed), then restored",
		"leader fences; no node runs units; one takes over after restore", quorumLost, Soak},
	{8, "unit-ignores-term", "managed unit ignores SIGTERM (leader then cut from etcd)",
		"fencing escalates to SIGKILL within S_max", unitIgnoresTerm, Soak},
	{9, "manual-start-standby", "operator runs `systemctl start kube-scheduler` on the standby",
		"refused by the guard with a message naming the leader", manualStart, CI | Soak},
	{10, "manual-start-no-guard", "same, with the guard drop-in removed",
		"the standby supervisor stops the unit within one poll", manualStartNoGuard, Alone},
	{11, "key-deleted-lease-revoked", "election key deleted by hand, then the new leader's lease revoked by hand",
		"old leader fences at once; new leader waits for it (barrier)", keyDeleted, Soak},
	{12, "unit-crash-loop", "managed unit crash-loops on the leader",
		"leader demotes; other node takes over", crashLoop, Soak},
	{13, "graceful-stop", "`systemctl stop kha-supervisor` on the leader",
		"handoff well under one second", gracefulStop, CI | Soak},
	{14, "simultaneous-start", "both supervisors start at the same instant",
		"exactly one leader", simultaneousStart, Soak},
	{15, "systemd-reexec", "systemd daemon-reexec, then a dbus restart, on the leader",
		"supervisor reconnects; no spurious fence", systemdReexec, Soak},
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

func leaderRackIsolated(ctx context.Context, r *Run) error {
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd and from "+r.Standby, func() error {
		return r.cutFromEtcd(ctx, r.Leader, r.Standby)
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	return r.Heal(ctx)
}

func leaderEtcdCut(ctx context.Context, r *Run) error {
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	return r.Heal(ctx)
}

func standbyRackIsolated(ctx context.Context, r *Run) error {
	fault, err := r.Fault("cut rack of "+r.Standby+" from etcd and from "+r.Leader, func() error {
		return r.cutFromEtcd(ctx, r.Standby, r.Leader)
	})
	if err != nil {
		return err
	}
	// Long enough for anything lease-related to happen: the standby's
	// member record expires after one TTL.
	if err := Sleep(ctx, r.Profile.TTL+3*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	if err := r.Heal(ctx); err != nil {
		return err
	}
	heal := r.Res.HealAt
	err = WaitFor(ctx, r.steadyTimeout(), "standby rejoins", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[r.Standby]
		if ok && rec.State == "standby" {
			return true, ""
		}
		return false, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	for _, ev := range r.Obs.Events(heal, time.Now()) {
		if ev.Record != nil && ev.Record.Node == r.Standby {
			r.Metric("rejoin", ev.At.Sub(heal))
			r.Mark(ev.At, r.Standby, r.Standby+" publishes its record again")
			break
		}
	}
	return nil
}

func killSupervisor(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault("kill -9 of kha-supervisor on "+r.Leader, func() error {
		var err error
		pid, err = r.Signal(ctx, r.Leader, "KILL")
		return err
	})
	if err != nil {
		return err
	}
	r.Notef("killed PID %d on %s", pid, r.Leader)
	// Either node may win: systemd restarts the killed supervisor after 1 s
	// and it campaigns like the other.
	if _, err := r.Failover(ctx, fault, r.Leader, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	return nil
}

func freezeSupervisor(ctx context.Context, r *Run) error {
	var pid int
	fault, err := r.Fault("SIGSTOP of kha-supervisor on "+r.Leader, func() error {
		var err error
		pid, err = r.Signal(ctx, r.Leader, "STOP")
		return err
	})
	if err != nil {
		return err
	}
	n := r.Nodes[r.Leader]
	r.Undo(func(ctx context.Context) error {
		// Gone already when the watchdog did its job; harmless otherwise.
		_, _ = n.Exec(ctx, "kill", "-s", "CONT", strconv.Itoa(pid))
		return nil
	})
	if _, err := r.Failover(ctx, fault, r.Leader, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	// The frozen process must have been killed (by the watchdog), not
	// thawed: it is no longer the main PID.
	now, _ := r.SupervisorPID(ctx, r.Leader)
	if now == pid {
		r.Failf("the frozen supervisor (PID %d) is still the main process: the watchdog did not kill it", pid)
	}
	if j := r.JournalSince(ctx, r.Leader, "", fault); strings.Contains(j, "Watchdog timeout") {
		r.Notef("systemd on %s logged the watchdog timeout", r.Leader)
	} else {
		r.Failf("no watchdog timeout in %s's journal since the fault", r.Leader)
	}
	return nil
}

// etcdLeader returns the member that is raft leader now.
func (r *Run) etcdLeader(ctx context.Context) (string, error) {
	for _, st := range r.Lab.Etcd.Statuses(ctx) {
		if st.Err == nil && st.ID == st.Leader {
			return st.Member, nil
		}
	}
	return "", fmt.Errorf("no etcd member reports itself leader")
}

func etcdMemberDown(ctx context.Context, r *Run) error {
	victim, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	fault, err := r.Fault("kill -9 of etcd member "+victim+" (raft leader)", func() error {
		return r.Lab.Etcd.Kill(ctx, victim)
	})
	if err != nil {
		return err
	}
	r.Notef("killed etcd member %s, the raft leader", victim)
	if err := Sleep(ctx, 2*r.Profile.TTL); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	if err := r.Lab.Etcd.Start(victim); err != nil {
		return err
	}
	r.Mark(time.Now(), "", "etcd member "+victim+" restarted")
	return nil
}

func quorumLost(ctx context.Context, r *Run) error {
	lead, err := r.etcdLeader(ctx)
	if err != nil {
		return err
	}
	victims := []string{lead}
	for _, m := range lab.EtcdNames {
		if m != lead && len(victims) < 2 {
			victims = append(victims, m)
		}
	}
	fault, err := r.Fault("kill -9 of etcd members "+strings.Join(victims, ", "), func() error {
		for _, v := range victims {
			if err := r.Lab.Etcd.Kill(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The leader cannot renew: it must stop its units on its own.
	err = WaitFor(ctx, r.failoverTimeout(), "leader fences", func() (bool, string) {
		t := r.refreshNow()
		return !r.AnyRunning(r.Leader, t), "units still beating on " + r.Leader
	})
	if err != nil {
		return err
	}
	var oldLast time.Time
	for _, u := range Units() {
		if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(oldLast) {
			oldLast = t
		}
	}
	r.Metric(report.MStopped, oldLast.Sub(fault))
	r.Mark(oldLast, r.Leader, "last heartbeat of "+r.Leader+"'s units")
	// Stay without quorum past the lease TTL: nobody may start anything.
	if err := Sleep(ctx, time.Until(fault.Add(r.Profile.TTL+3*time.Second))); err != nil {
		return err
	}
	restore := time.Now()
	_ = r.W.Refresh()
	for _, n := range lab.MasterNames {
		for _, u := range Units() {
			if ins := r.W.InstancesBetween(n, u, oldLast.Add(witness.Grace), restore); len(ins) > 0 {
				r.Failf("%s ran on %s while etcd had no quorum", u, n)
			}
		}
	}
	r.Mark(restore, "", "etcd members restarted")
	for _, v := range victims {
		if err := r.Lab.Etcd.Start(v); err != nil {
			return err
		}
	}
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return err
	}
	var first time.Time
	for _, u := range Units() {
		if t, ok := r.W.FirstStart(newLeader, u, restore); ok && t.After(first) {
			first = t
		}
	}
	if !first.IsZero() {
		r.Metric("recover", first.Sub(restore))
	}
	r.Notef("quorum lost for %s; %s took over after restore", restore.Sub(fault).Round(time.Millisecond), newLeader)
	r.expectStoppedBeforeWin()
	return nil
}

func unitIgnoresTerm(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	w := witnessOf(scheduler)
	if err := n.SetFault(w, master.Fault{IgnoreTerm: true}); err != nil {
		return err
	}
	r.Undo(func(context.Context) error { return n.SetFault(w, master.Fault{}) })
	// The leader may restart its own unit (the guard lets it): the new
	// instance ignores SIGTERM.
	before := time.Now()
	if _, err := n.Systemctl(ctx, "restart", w.Service()); err != nil {
		return err
	}
	err := WaitFor(ctx, 30*time.Second, "restarted unit beating", func() (bool, string) {
		t := r.refreshNow()
		_, ok := r.W.FirstStart(r.Leader, scheduler, before)
		return ok && r.Running(r.Leader, t), "not yet"
	})
	if err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd ("+scheduler+" ignores SIGTERM)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	// Evidence of the escalation: the scheduler outlived the other unit
	// (it ignored SIGTERM) and systemd saw it die of SIGKILL.
	_ = r.W.Refresh()
	sLast, _ := r.W.LastBeat(r.Leader, scheduler, time.Now())
	var others time.Time
	for _, u := range Units() {
		if u != scheduler {
			if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(others) {
				others = t
			}
		}
	}
	if !others.IsZero() {
		r.Metric("term_ignored_for", sLast.Sub(others))
	}
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ExecMainCode", "-p", "ExecMainStatus", "-p", "Result", w.Service())
	if err != nil {
		return err
	}
	props := string(out)
	if !strings.Contains(props, "ExecMainStatus=9") {
		r.Failf("%s on %s did not end by SIGKILL: %s", w.Service(), r.Leader, strings.Join(strings.Fields(props), " "))
	} else {
		r.Notef("%s on %s ended by SIGKILL (%s)", w.Service(), r.Leader, strings.Join(strings.Fields(props), " "))
	}
	return r.Heal(ctx)
}

func manualStart(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Standby]
	unit := scheduler + ".service"
	r.Undo(func(ctx context.Context) error {
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
		return nil
	})
	fault := time.Now()
	// The guard (ExecStartPre=) answers within a few hundred ms here; if the
	// standby's own enforcement polls the unit while it is still in
	// start-pre, it stops the unit first and the guard's message is lost
	// (the start is refused all the same). Try a few times to see the
	// guard's own answer, and count the other outcome.
	const attempts = 3
	canceled := 0
	msg := ""
	for i := 1; i <= attempts && msg == ""; i++ {
		var out string
		var code int
		at, err := r.Fault("systemctl start "+scheduler+" on the standby "+r.Standby, func() error {
			out, code = n.Run(ctx, "systemctl", "start", unit)
			return nil
		})
		if err != nil {
			return err
		}
		if i == 1 {
			fault = at
		}
		if code == 0 {
			r.Failf("systemctl start on the standby succeeded")
			break
		}
		if err := Sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
		for _, line := range strings.Split(r.JournalSince(ctx, r.Standby, unit, at), "\n") {
			if strings.Contains(line, "refusing") && strings.Contains(line, r.Leader) {
				msg = strings.TrimSpace(line)
				r.Notef("refused (systemctl exit %d); guard said: %s", code, msg)
				if r.Res.Figures.GuardMessage == "" {
					r.Res.Figures.GuardMessage = msg
				}
			}
		}
		if msg == "" {
			canceled++
			r.Notef("attempt %d: systemctl said %q; the guard did not answer (the standby stopped the unit in start-pre first)", i, strings.TrimSpace(out))
		}
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
	}
	r.Res.FaultAt = fault
	if canceled > 0 {
		r.Notef("%d of the attempts were stopped by the standby's enforcement before the guard answered", canceled)
	}
	if msg == "" {
		r.Failf("no refusal naming the leader %s from the guard in %d attempts", r.Leader, attempts)
	}
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	return nil
}

// guardDropins finds the drop-ins that bind scheduler to the supervisor
// inside n: install-dropins writes /etc, the package ships /usr/lib, and
// either alone keeps the guard in place.
func guardDropins(n *master.Node) ([]string, error) {
	var out []string
	var seen []os.FileInfo
	for _, dir := range []string{"/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		p := dropin.Path(dir, scheduler+".service")
		fi, err := os.Stat(filepath.Join(n.Root(), p))
		if err != nil || slices.ContainsFunc(seen, func(o os.FileInfo) bool { return os.SameFile(o, fi) }) {
			continue // absent, or the same file again (/lib -> usr/lib)
		}
		seen = append(seen, fi)
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s drop-in for %s", n.Name, dropin.FileName, scheduler)
	}
	return out, nil
}

func manualStartNoGuard(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Standby]
	paths, err := guardDropins(n)
	if err != nil {
		return err
	}
	// Registered first, so it runs last (undo steps run last-in,
	// first-out): after every drop-in is back.
	r.Undo(func(ctx context.Context) error {
		_, err := n.Systemctl(ctx, "daemon-reload")
		return err
	})
	for _, p := range paths {
		host := filepath.Join(n.Root(), p)
		if err := os.Rename(host, host+".lab-removed"); err != nil {
			return err
		}
		r.Undo(func(ctx context.Context) error {
			return os.Rename(host+".lab-removed", host)
		})
	}
	if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	// Reloading systemd stalls its bus for seconds on this machine; let the
	// standby's supervisor get past that before the operator's start, so
	// the measurement is about the start and not about the reload.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	unit := scheduler + ".service"
	fault, err := r.Fault("systemctl start "+scheduler+" on the standby "+r.Standby+" without the guard", func() error {
		_, err := n.Systemctl(ctx, "start", unit)
		return err
	})
	if err != nil {
		return err
	}
	// Whatever overlap the hand-started instance has with the leader's is
	// the operator's doing (the guard was removed); it is reported apart.
	r.excuse = func(o witness.Overlap) bool {
		rogue := func(i witness.Instance) bool {
			return i.Node == r.Standby && i.Unit == scheduler && !i.First.Before(fault)
		}
		return rogue(o.A) || rogue(o.B)
	}
	err = WaitFor(ctx, 10*r.Profile.Poll+10*time.Second, "standby supervisor stops the unit", func() (bool, string) {
		st, err := n.ActiveState(ctx, unit)
		return err == nil && (st == "inactive" || st == "failed"), "unit " + st
	})
	if err != nil {
		return err
	}
	// How long it ran, by systemd's own clock (monotonic, microseconds).
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "-p", "InactiveEnterTimestampMonotonic", unit)
	if err != nil {
		return err
	}
	props := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			props[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if a, i := props["ActiveEnterTimestampMonotonic"], props["InactiveEnterTimestampMonotonic"]; a > 0 && i > a {
		r.Metric("rogue_active", time.Duration(i-a)*time.Microsecond)
	}
	_ = r.W.Refresh()
	if first, ok := r.W.FirstStart(r.Standby, scheduler, fault); ok {
		last, _ := r.W.LastBeat(r.Standby, scheduler, time.Now())
		r.Metric("rogue_beating", last.Sub(first)+witness.Grace)
		r.Metric(report.MStopped, last.Sub(fault))
		r.Mark(first, r.Standby, "hand-started unit beats on "+r.Standby)
		r.Mark(last, r.Standby, "its last heartbeat")
	} else {
		r.Notef("the hand-started unit was stopped before its first heartbeat")
	}
	if j := r.JournalSince(ctx, r.Standby, lab.SupervisorUnit, fault); strings.Contains(j, "running on standby; stopping it") {
		r.Notef("the standby's supervisor logged: managed unit running on standby; stopping it")
	} else {
		r.Failf("the standby's supervisor did not log stopping the unit")
	}
	if ch := r.Obs.LeaderChanges(fault, time.Now()); len(ch) > 0 {
		r.Failf("leadership changed")
	}
	return nil
}

func keyDeleted(ctx context.Context, r *Run) error {
	fault, err := r.Fault("delete the election key (held by "+r.Leader+")", func() error {
		dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := r.Cli.Delete(dctx, r.Keys.Leader())
		return err
	})
	if err != nil {
		return err
	}
	// Normally the standby, campaigning all along, wins at once; the old
	// leader, restarted after fencing, may win too if the standby was not
	// campaigning at that instant. Either way the barrier must hold.
	newLeader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return err
	}
	if newLeader == r.Leader {
		r.Notef("the old leader %s won again after fencing and restarting", newLeader)
	}
	// Here the margin may be negative by design: the key vanished under a
	// running leader, so the other node may win before the old units are
	// down; the promotion barrier, not the lease, keeps them apart.
	r.barrier(fault, r.Leader, newLeader, "")

	// Second half: the new leader's election lease revoked by hand.
	old := newLeader
	_, _, err = r.Steady(ctx, r.steadyTimeout())
	if err != nil {
		return err
	}
	r.Leader, r.Standby, r.LeaderToken = old, Other(old), r.Obs.Now().Token
	gctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	resp, err := r.Cli.Get(gctx, r.Keys.Leader())
	cancel()
	if err != nil || len(resp.Kvs) != 1 {
		return fmt.Errorf("read the election key: %v", err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	saved := maps.Clone(r.Res.Metrics)
	fault2, err := r.Fault(fmt.Sprintf("revoke the election lease %x (held by %s)", lease, old), func() error {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := r.Cli.Revoke(rctx, lease)
		return err
	})
	if err != nil {
		return err
	}
	r.Res.FaultAt = fault
	back, err := r.Failover(ctx, fault2, lab.MasterNames...)
	if err != nil {
		return err
	}
	// The row's standard metrics are the deletion's; the revocation's go
	// under their own names.
	second := maps.Clone(r.Res.Metrics)
	for _, k := range []string{report.MStopped, report.MWon, report.MFailover, report.MMargin, report.MGap} {
		delete(r.Res.Metrics, k)
		if v, ok := second[k]; ok {
			r.Res.Metrics["revoke_"+k] = v
		}
		if v, ok := saved[k]; ok {
			r.Res.Metrics[k] = v
		}
	}
	r.barrier(fault2, old, back, "revoke_")
	r.Res.NewLeader = newLeader
	return nil
}

// barrier records how long after the old leader's last heartbeat the new
// leader's first unit started: the promotion barrier makes it positive even
// though the new leader won the key while the old units still ran.
func (r *Run) barrier(fault time.Time, old, new, prefix string) {
	_ = r.W.Refresh()
	var oldLast, newFirst time.Time
	for _, u := range Units() {
		// The old leader's instance that was running at the fault (the
		// same node may run a new one later, after winning again).
		if in, ok := r.W.InstanceAt(old, u, fault); ok && in.Last.After(oldLast) {
			oldLast = in.Last
		}
		if t, ok := r.W.FirstStart(new, u, fault); ok && (newFirst.IsZero() || t.Before(newFirst)) {
			newFirst = t
		}
	}
	if oldLast.IsZero() || newFirst.IsZero() {
		r.Failf("%sbarrier not measurable", prefix)
		return
	}
	r.Metric(prefix+"barrier", newFirst.Sub(oldLast))
	if !newFirst.After(oldLast) {
		r.Failf("%s started a unit %.1f ms before %s's last heartbeat", new, float64(oldLast.Sub(newFirst).Microseconds())/1000, old)
	}
}

func crashLoop(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	w := witnessOf(scheduler)
	if err := n.SetFault(w, master.Fault{CrashAfter: 300 * time.Millisecond}); err != nil {
		return err
	}
	r.Undo(func(context.Context) error { return n.SetFault(w, master.Fault{}) })
	fault, err := r.Fault("restart "+scheduler+" on "+r.Leader+" into a crash loop (exit 1 every 300 ms)", func() error {
		_, err := n.Systemctl(ctx, "restart", w.Service())
		return err
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	if rec, ok := r.Obs.Now().Records[r.Leader]; ok {
		r.Notef("%s after demotion: state %s, reason %q, cooldown until %s", r.Leader, rec.State, rec.Reason, rec.Cooldown.Format("15:04:05.000"))
	}
	return nil
}

func gracefulStop(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	var took time.Duration
	fault, err := r.Fault("systemctl stop kha-supervisor on "+r.Leader, func() error {
		t := time.Now()
		_, err := n.Systemctl(ctx, "stop", lab.SupervisorUnit)
		took = time.Since(t)
		return err
	})
	if err != nil {
		return err
	}
	r.Metric("systemctl_stop", took)
	if _, err := r.Failover(ctx, fault, r.Standby); err != nil {
		return err
	}
	_ = r.W.Refresh()
	var oldLast, newFirst time.Time
	for _, u := range Units() {
		if t, ok := r.W.LastBeat(r.Leader, u, time.Now()); ok && t.After(oldLast) {
			oldLast = t
		}
		if t, ok := r.W.FirstStart(r.Standby, u, fault); ok && t.After(newFirst) {
			newFirst = t
		}
	}
	r.Metric("handoff", newFirst.Sub(oldLast))
	r.expectStoppedBeforeWin()
	return nil
}

func simultaneousStart(ctx context.Context, r *Run) error {
	// A start can fail before the supervisor runs at all (status 219/CGROUP:
	// this host's legacy cgroup hierarchy sometimes refuses the new unit's
	// cgroup right after the old one went); systemd restarts it a second
	// later, which is no longer "at the same instant". Such an attempt is
	// noted and the whole start is tried again.
	const attempts = 3
	for i := 1; i <= attempts; i++ {
		ok, err := r.startBoth(ctx, i == attempts)
		if err != nil || ok {
			return err
		}
		if _, _, err := r.Steady(ctx, r.steadyTimeout()); err != nil {
			return err
		}
		snap := r.Obs.Now()
		r.Leader, r.Standby, r.LeaderToken = snap.Leader, Other(snap.Leader), snap.Token
	}
	return nil
}

// startBoth stops both supervisors, then starts them at once. It returns
// false (and no error) when a start failed before the race could happen and
// last is not set.
func (r *Run) startBoth(ctx context.Context, last bool) (bool, error) {
	// Stop the standby first, then the leader (its units stop, the lease
	// is released), so that both start from nothing.
	for _, name := range []string{r.Standby, r.Leader} {
		if _, err := r.Nodes[name].Systemctl(ctx, "stop", lab.SupervisorUnit); err != nil {
			return false, err
		}
	}
	err := WaitFor(ctx, r.failoverTimeout(), "no leader, nothing running", func() (bool, string) {
		t := r.refreshNow()
		snap := r.Obs.Now()
		if snap.Leader != "" {
			return false, "election key still held by " + snap.Leader
		}
		for _, name := range lab.MasterNames {
			if r.AnyRunning(name, t) {
				return false, "units beating on " + name
			}
		}
		return true, ""
	})
	if err != nil {
		return false, err
	}
	// Nobody held anything at the start: no old leader to measure against.
	r.LeaderToken, r.Leader = 0, ""
	var wg sync.WaitGroup
	errs := make([]error, len(lab.MasterNames))
	fault, err := r.Fault("start both supervisors at once", func() error {
		for i, name := range lab.MasterNames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = r.Nodes[name].Systemctl(ctx, "start", lab.SupervisorUnit)
			}()
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		return false, err
	}
	failed := false
	for i, e := range errs {
		if e != nil {
			failed = true
			r.Notef("start of the supervisor on %s failed (%v); systemd restarts it", lab.MasterNames[i], firstLine(e.Error()))
		}
	}
	leader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return false, err
	}
	if failed && !last {
		return false, nil
	}
	if err := Sleep(ctx, r.Profile.TTL); err != nil {
		return false, err
	}
	ch := r.Obs.LeaderChanges(fault, time.Now())
	if len(ch) != 1 {
		var seq []string
		for _, c := range ch {
			seq = append(seq, *c.Leader)
		}
		r.Failf("want exactly one election after the start, saw %d: %v", len(ch), seq)
	}
	other := Other(leader)
	_ = r.W.Refresh()
	for _, u := range Units() {
		if ins := r.W.InstancesBetween(other, u, fault, time.Now()); len(ins) > 0 {
			r.Failf("%s also ran %s", other, u)
		}
	}
	r.Notef("%s won", leader)
	return true, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func systemdReexec(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Leader]
	pid, err := r.SupervisorPID(ctx, r.Leader)
	if err != nil {
		return err
	}
	fault, err := r.Fault("systemctl daemon-reexec on "+r.Leader, func() error {
		_, err := n.Systemctl(ctx, "daemon-reexec")
		return err
	})
	if err != nil {
		return err
	}
	if err := Sleep(ctx, 3*time.Second); err != nil {
		return err
	}
	r.Mark(time.Now(), r.Leader, "dbus restart")
	if out, code := n.Run(ctx, "systemctl", "restart", "dbus.service"); code != 0 {
		r.Notef("dbus restart refused (exit %d): %s", code, strings.TrimSpace(out))
	}
	if err := Sleep(ctx, r.Profile.TTL+2*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	now, err := r.SupervisorPID(ctx, r.Leader)
	if err != nil {
		return err
	}
	if now != pid {
		r.Failf("kha-supervisor on %s restarted (PID %d -> %d): a spurious fence or crash", r.Leader, pid, now)
	}
	return nil
}
