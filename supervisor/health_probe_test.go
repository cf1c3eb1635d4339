package supervisor_test

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
)

// healthz stands in for one master's kube-scheduler secure port: it answers
// /healthz until frozen, then holds every request unanswered, as a
// SIGSTOPped process does (the kernel still accepts the connection).
type healthz struct {
	srv    *httptest.Server
	frozen atomic.Bool
	hits   atomic.Int64
	caFile string
}

func newHealthz(t *testing.T) *healthz {
	h := &healthz{}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.hits.Add(1)
		if h.frozen.Load() {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(h.srv.Close)
	h.caFile = filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(h.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// probing configures the scheduler's probe against h: 200 ms interval and
// timeout, two failures make it unhealthy (so the leader steps down after
// 2 + 3 - 1 = 4 failed probes with failure_threshold 3).
func (h *healthz) probing(c *config.Config) {
	c.Health.Probes = []string{units[1] + "=" + h.srv.URL + "/healthz"}
	c.Health.CA = h.caFile
	c.Health.Interval = 200 * time.Millisecond
	c.Health.Timeout = 200 * time.Millisecond
	c.Health.FailureThreshold = 2
	c.Health.Grace = 3 * time.Second
}

func probeState(m *member) string {
	for _, r := range m.Sup.Status().Health {
		if r.Unit == units[1] {
			return r.State
		}
	}
	return "(no probe)"
}

// A scheduler that stays active in systemd but stops answering its
// /healthz, and keeps not answering after every restart in place, is a unit
// failure each time: the leader's probe finds it, restarts it twice, the
// third failure reaches units.failure_threshold, the leader demotes into
// its cooldown and the other member takes over, with no overlap. Standbys
// do not probe.
func TestFrozenUnitFailsItsProbeAndTheLeaderStepsDown(t *testing.T) {
	hz, leader, standby := probingPair(t)

	before := hz[standby.Name].hits.Load()
	time.Sleep(time.Second)
	if n := hz[standby.Name].hits.Load() - before; n != 0 || probeState(standby) != health.StateOff {
		t.Fatalf("the standby probed %d times (state %s): standbys must not probe", n, probeState(standby))
	}

	frozenAt := time.Now()
	hz[leader.Name].frozen.Store(true)
	waitFor(t, "the other member to take over", 40*time.Second, func() bool { return leaderActive(standby) })
	took := time.Since(frozenAt)
	waitFor(t, "the frozen leader to be standby", 10*time.Second, func() bool { return leader.State() == group.Standby })
	st := leader.Sup.Status()
	if !st.CooldownUntil.After(time.Now().Add(10 * time.Second)) {
		t.Fatalf("the frozen leader %s, cooldown until %v: want most of its 30 s cooldown ahead", st.State, st.CooldownUntil)
	}
	if probeState(leader) != health.StateOff {
		t.Fatalf("the demoted leader still probes: %+v", st.Health)
	}
	waitFor(t, "the new leader's probe to be healthy", 15*time.Second, func() bool { return probeState(standby) == health.StateHealthy })
	overlap := assertNoOverlap(t, leader, standby)
	t.Logf("frozen probe to the other member active: %s; overlap %s", took, overlap)
}

// stops counts unit's stops (graceful or killed) on m after since.
func stops(m *member, unit string, since time.Time) int {
	n := 0
	for _, e := range m.Units.Snapshot() {
		if e.Unit == unit && e.What != "started" && e.What != "failed" && e.At.After(since) {
			n++
		}
	}
	return n
}

// A scheduler that hangs on a healthy leader (active in systemd, its
// /healthz unanswered, as after SIGSTOP) is restarted in place, as a
// crashed one is: the leader keeps its term, the other member never takes
// over, and the new process answers. Before, every failed probe counted a
// unit failure and the leader stepped down (issue 21 item 4).
func TestHungUnitIsRestartedInPlace(t *testing.T) {
	hz, leader, standby := probingPair(t)
	token := leader.Sup.Status().Token

	frozenAt := time.Now()
	hz[leader.Name].frozen.Store(true)
	// The stand-in's process is replaced by the restart: the new one answers.
	waitFor(t, "the hung scheduler to be stopped", 10*time.Second, func() bool {
		if leader.State() != group.Active || standby.State() != group.Standby {
			t.Fatalf("leadership moved instead of a restart in place: %s is %s, %s is %s",
				leader.Name, leader.State(), standby.Name, standby.State())
		}
		return stops(leader, units[1], frozenAt) > 0
	})
	hz[leader.Name].frozen.Store(false)
	restarted := firstStartAfter(leader, frozenAt)
	waitFor(t, "the restarted scheduler to run", 5*time.Second, func() bool {
		restarted = firstStartAfter(leader, frozenAt)
		return !restarted.IsZero()
	})
	waitFor(t, "the restarted scheduler's probe to be healthy", 10*time.Second, func() bool { return probeState(leader) == health.StateHealthy })
	supervisortest.StaysLeader(t, leader, standby, 2*time.Second, "after a restart in place", nil)
	st := leader.Sup.Status()
	if st.Token != token {
		t.Fatalf("token %d after the restart, %d before: the term must not change", st.Token, token)
	}
	if n := stops(leader, units[0], frozenAt); n != 0 {
		t.Fatalf("the controller-manager was stopped %d times: only the hung unit is restarted", n)
	}
	if n := stops(leader, units[1], frozenAt); n != 1 {
		t.Fatalf("the scheduler was stopped %d times: want one restart", n)
	}
	if !st.CooldownUntil.IsZero() && st.CooldownUntil.After(time.Now()) {
		t.Fatalf("cooldown until %v after one restart", st.CooldownUntil)
	}
	assertNoOverlap(t, leader, standby)
	t.Logf("frozen probe to the restarted scheduler running: %s (probe every 200 ms, 2 in a row)", restarted.Sub(frozenAt))
}

// A scheduler stopped by SIGSTOP (its processes stopped, as the units tell
// from its control group) is hung at once: the leader restarts it after
// two probe intervals of it stopped and unanswered, without waiting for a
// probe's timeout (here 30 s, so none can fail within the test), keeps its
// term, and the other member never takes over (issue 21 item 4: lab 49).
func TestStoppedUnitIsRestartedWithoutWaitingForTheProbesTimeout(t *testing.T) {
	hz, leader, standby := probingPair(t, func(c *config.Config) { c.Health.Timeout = 30 * time.Second })
	token := leader.Sup.Status().Token

	frozenAt := time.Now()
	hz[leader.Name].frozen.Store(true)
	leader.Units.SetStopped(units[1], true)
	waitFor(t, "the stopped scheduler to be restarted", 10*time.Second, func() bool {
		if leader.State() != group.Active || standby.State() != group.Standby {
			t.Fatalf("leadership moved instead of a restart in place: %s is %s, %s is %s",
				leader.Name, leader.State(), standby.Name, standby.State())
		}
		return stops(leader, units[1], frozenAt) > 0
	})
	took := time.Since(frozenAt)
	hz[leader.Name].frozen.Store(false)
	waitFor(t, "the restarted scheduler's probe to be healthy", 10*time.Second, func() bool { return probeState(leader) == health.StateHealthy })
	st := leader.Sup.Status()
	if st.Token != token {
		t.Fatalf("token %d after the restart, %d before: the term must not change", st.Token, token)
	}
	for _, r := range st.Health {
		if r.Unit == units[1] && r.Failures != 0 {
			t.Fatalf("%d failed probes: the restart was to come from the stopped looks, before any 30 s timeout", r.Failures)
		}
	}
	if n := stops(leader, units[1], frozenAt); n != 1 {
		t.Fatalf("the scheduler was stopped %d times: want one restart", n)
	}
	assertNoOverlap(t, leader, standby)
	t.Logf("stopped to restarted: %s (probe every 200 ms, timeout 30 s)", took)
}

// probingPair starts two members whose scheduler probes ask hz, and waits
// until the leader's probe is healthy. adjust, if any, changes both
// members' configuration after the probe's.
func probingPair(t *testing.T, adjust ...func(*config.Config)) (map[string]*healthz, *supervisortest.Member, *supervisortest.Member) {
	t.Helper()
	w := newWorld(t)
	hz := map[string]*healthz{"m1": newHealthz(t), "m2": newHealthz(t)}
	conf := func(h *healthz) func(*config.Config) {
		return func(c *config.Config) {
			h.probing(c)
			for _, f := range adjust {
				f(c)
			}
		}
	}
	a, b := w.Start("m1", conf(hz["m1"])), w.Start("m2", conf(hz["m2"]))
	leader, others := leaderOf(t, a, b)
	waitFor(t, "the leader's scheduler probe to be healthy", 15*time.Second, func() bool { return probeState(leader) == health.StateHealthy })
	return hz, leader, others[0]
}
