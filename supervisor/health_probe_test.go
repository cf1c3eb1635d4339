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
	c.Health.Grace = 10 * time.Second
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
// /healthz is a unit failure: the leader's probe finds it, the failures
// reach units.failure_threshold, the leader demotes into its cooldown and
// the other member takes over, with no overlap. Standbys do not probe.
func TestFrozenUnitFailsItsProbeAndTheLeaderStepsDown(t *testing.T) {
	w := newWorld(t)
	hz := map[string]*healthz{"m1": newHealthz(t), "m2": newHealthz(t)}
	a, b := w.Start("m1", hz["m1"].probing), w.Start("m2", hz["m2"].probing)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	waitFor(t, "the leader's scheduler probe to be healthy", 15*time.Second, func() bool { return probeState(leader) == health.StateHealthy })

	before := hz[standby.Name].hits.Load()
	time.Sleep(time.Second)
	if n := hz[standby.Name].hits.Load() - before; n != 0 || probeState(standby) != health.StateOff {
		t.Fatalf("the standby probed %d times (state %s): standbys must not probe", n, probeState(standby))
	}

	frozenAt := time.Now()
	hz[leader.Name].frozen.Store(true)
	waitFor(t, "the other member to take over", 30*time.Second, func() bool { return leaderActive(standby) })
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
	overlap := assertNoOverlap(t, a, b)
	t.Logf("frozen probe to the other member active: %s; overlap %s", took, overlap)
}
