package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
)

// cli runs one command as an operator would, against the world's etcd.
func cli(t *testing.T, w *supervisortest.World, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	args = append(args, "-c", w.ConfigFile("m1")) // m1 is this node for status
	code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &out}, args)
	t.Logf("$ kha-supervisor %s -> %d\n%s", strings.Join(args[:len(args)-2], " "), code, out.String())
	return code, out.String()
}

func other(ms []*supervisortest.Member, not *supervisortest.Member) *supervisortest.Member {
	for _, m := range ms {
		if m != not {
			return m
		}
	}
	return nil
}

func TestStatusHandoffBanHistory(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	ms := []*supervisortest.Member{a, b}
	leader, _ := supervisortest.LeaderOf(t, a, b)
	standby := other(ms, leader)

	// status --json names the leader and both members.
	code, out := cli(t, w, "status", "--json")
	var cs group.ClusterStatus
	if code != exitOK || json.Unmarshal([]byte(out), &cs) != nil || cs.Leader != leader.Name || len(cs.Members) != 2 || cs.Token == 0 {
		t.Fatalf("status --json: code %d, %+v", code, cs)
	}
	if code, out = cli(t, w, "status"); code != exitOK || !strings.Contains(out, leader.Name) || !strings.Contains(out, "leader") {
		t.Fatalf("status table: %d %q", code, out)
	}

	// A planned switchover to a named node, waited for.
	code, out = cli(t, w, "handoff", "--to", standby.Name, "--wait", "--timeout", "20s")
	if code != exitOK || !strings.Contains(out, "-> "+standby.Name) {
		t.Fatalf("handoff: %d %q", code, out)
	}
	supervisortest.LeaderOf(t, a, b)
	if standby.State() != group.Active {
		t.Fatalf("target %s is %s after handoff", standby.Name, standby.State())
	}
	supervisortest.AssertNoOverlap(t, a, b)
	leader, standby = standby, leader

	// Refusals name the problem.
	if code, out = cli(t, w, "handoff", "--to", leader.Name); code != exitConfig || !strings.Contains(out, "already the leader") {
		t.Fatalf("handoff to the leader: %d %q", code, out)
	}
	if code, out = cli(t, w, "handoff", "--to", "nosuch"); code != exitConfig || !strings.Contains(out, "no live member") {
		t.Fatalf("handoff to an unknown node: %d %q", code, out)
	}

	// Banning the leader makes it step down; the other takes over; the
	// banned node stays standby.
	if code, _ = cli(t, w, "ban", leader.Name, "--reason", "disk swap"); code != exitOK {
		t.Fatalf("ban: %d", code)
	}
	supervisortest.WaitFor(t, "the other node to take over from the banned leader", 20*time.Second, func() bool {
		return standby.State() == group.Active
	})
	// The only other member is banned: status warns and exits 10.
	code, out = cli(t, w, "status")
	if code != exitNoStandby || !strings.Contains(out, "BANNED") ||
		!strings.Contains(out, "WARNING: no member could take over from "+standby.Name+": "+leader.Name+" is banned") {
		t.Fatalf("status does not show the ban and the lost redundancy: exit %d %q", code, out)
	}
	// While banned it does not campaign even when the key is free.
	if code, _ = cli(t, w, "handoff", "--to", leader.Name); code != exitConfig {
		t.Fatalf("handoff to a banned node must be refused, got %d", code)
	}
	if code, _ = cli(t, w, "unban", leader.Name); code != exitOK {
		t.Fatalf("unban: %d", code)
	}
	if code, out = cli(t, w, "unban", leader.Name); code != exitConfig || !strings.Contains(out, "not banned") {
		t.Fatalf("second unban: %d %q", code, out)
	}
	supervisortest.AssertNoOverlap(t, a, b)

	// The history has every transition, newest last, bounded by --limit.
	code, out = cli(t, w, "history", "--json", "--limit", "0")
	var evs []group.Event
	if code != exitOK || json.Unmarshal([]byte(out), &evs) != nil {
		t.Fatalf("history: %d %q", code, out)
	}
	kinds := map[string]bool{}
	for i, ev := range evs {
		kinds[ev.Kind] = true
		if i > 0 && ev.At.Before(evs[i-1].At) {
			t.Fatalf("history out of order at %d", i)
		}
	}
	for _, k := range []string{"registered", "elected", "units_started", "handoff", "banned"} {
		if !kinds[k] {
			t.Errorf("history lacks a %q transition: %v", k, kinds)
		}
	}
	if code, out = cli(t, w, "history", "--json", "--limit", "3"); code != exitOK || json.Unmarshal([]byte(out), &evs) != nil || len(evs) != 3 {
		t.Fatalf("history --limit 3: %d, %d entries", code, len(evs))
	}
}

func TestFreezeBlocksPromotionButNotFencing(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := supervisortest.LeaderOf(t, a, b)
	if code, _ := cli(t, w, "freeze", "--reason", "etcd upgrade"); code != exitOK {
		t.Fatal("freeze failed")
	}
	code, out := cli(t, w, "status")
	if code != exitNoStandby || !strings.Contains(out, "FROZEN") || !strings.Contains(out, "etcd upgrade") {
		t.Fatalf("status does not show the freeze loudly: %q", out)
	}
	if code, out = cli(t, w, "handoff"); code != exitConfig || !strings.Contains(out, "frozen") {
		t.Fatalf("handoff while frozen: %d %q", code, out)
	}
	if code, out = cli(t, w, "drill", "failover"); code != exitConfig || !strings.Contains(out, "frozen") {
		t.Fatalf("drill while frozen: %d %q", code, out)
	}
	// The leader keeps its units while frozen, and still fences when it
	// loses etcd.
	leader.Cut(true)
	if err := leader.WaitExit(t, 20*time.Second, "fence while frozen"); err == nil {
		t.Fatal("frozen leader cut off from etcd returned without fencing")
	}
	// Nobody promotes while frozen, even though the lease has lapsed.
	time.Sleep(6 * time.Second)
	if others[0].State() != group.Standby || others[0].Units.Running(supervisortest.Units[0]) {
		t.Fatalf("standby promoted while frozen: %s", others[0].State())
	}
	if code, _ = cli(t, w, "unfreeze"); code != exitOK {
		t.Fatal("unfreeze failed")
	}
	supervisortest.LeaderOf(t, others[0])
	supervisortest.AssertNoOverlap(t, a, b)
}

func TestDrills(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, _ := supervisortest.LeaderOf(t, a, b)

	// A probe kubeconfig that cannot be read is bad input: refused before
	// any request, nothing moves.
	code, out := cli(t, w, "drill", "handoff", "--probe-kubeconfig", "/nonexistent/probe.kubeconfig")
	if code != exitConfig || !strings.Contains(out, "--probe-kubeconfig /nonexistent/probe.kubeconfig") {
		t.Fatalf("drill with an unreadable probe kubeconfig: %d %q", code, out)
	}
	code, out = cli(t, w, "drill", "handoff", "--probe-namespace", "Kube_System")
	if code != exitConfig || !strings.Contains(out, `--probe-namespace "Kube_System"`) {
		t.Fatalf("drill with a bad probe namespace: %d %q", code, out)
	}
	if l, _ := supervisortest.LeaderOf(t, a, b); l != leader {
		t.Fatalf("leadership moved on a refused drill: %s -> %s", leader.Name, l.Name)
	}

	code, out = cli(t, w, "drill", "handoff", "--expect-within", "20s")
	if code != exitOK || !strings.Contains(out, "PASS") || !strings.Contains(out, "new units active") {
		t.Fatalf("drill handoff: %d %q", code, out)
	}
	// The failover drill: the leader fences without releasing, so the
	// other must wait out the lease. An expectation far below the TTL must
	// fail the drill (exit 7) while the safety check itself passes.
	leader, _ = supervisortest.LeaderOf(t, a, b)
	code, out = cli(t, w, "drill", "failover", "--expect-within", "100ms")
	if code != exitDrillFailed || !strings.Contains(out, "more than the expected") {
		t.Fatalf("drill failover with a too tight expectation: %d %q", code, out)
	}
	if strings.Contains(out, "before") && strings.Contains(out, "FAIL: "+leader.Name) {
		t.Fatalf("safety check failed: %q", out)
	}
	if err := leader.WaitExit(t, 10*time.Second, "fence for the drill"); err == nil || !strings.Contains(err.Error(), "drill") {
		t.Fatalf("drilled leader returned %v, want a fence naming the drill", err)
	}
	// Bring the fenced member back, as systemd would, and drill again with
	// a reasonable expectation: TTL plus start-up.
	back := w.Start(leader.Name, nil)
	supervisortest.WaitFor(t, "the fenced member to rejoin as standby", 20*time.Second, func() bool {
		return back.State() == group.Standby
	})
	code, out = cli(t, w, "drill", "failover", "--expect-within", "20s")
	if code != exitOK || !strings.Contains(out, "PASS") {
		t.Fatalf("drill failover: %d %q", code, out)
	}
	supervisortest.AssertNoOverlap(t, a, b, back)
}

func TestOperatorUsageErrors(t *testing.T) {
	var out bytes.Buffer
	e := env{ctx: context.Background(), stdout: &out, stderr: &out}
	if code := dispatch(e, []string{"drill"}); code != exitConfig {
		t.Fatalf("drill without a kind: %d", code)
	}
	if code := dispatch(e, []string{"drill", "sideways"}); code != exitConfig {
		t.Fatalf("drill with a bad kind: %d", code)
	}
	if code := dispatch(e, []string{"history", "-c", "/nonexistent/kha.toml"}); code != exitConfig || !strings.Contains(out.String(), "/nonexistent/kha.toml") {
		t.Fatalf("missing config: %d %q", code, out.String())
	}
}
