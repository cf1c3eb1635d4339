package supervisor_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
)

// TestMismatchedConfigurationIsReported: two members of one group with
// different managed units each see the other's record, fingerprint and
// all, and say so in Status.
func TestMismatchedConfigurationIsReported(t *testing.T) {
	w := newWorld(t)
	a := w.Start("m1", nil)
	b := w.Start("m2", func(c *config.Config) { c.Units.Managed = []string{units[1], units[0]} })
	for _, m := range []*member{a, b} {
		other := "m2"
		if m == b {
			other = "m1"
		}
		waitFor(t, m.Name+" reports "+other+" as configured differently", 20*time.Second, func() bool {
			mm := m.Sup.Status().ConfigMismatch
			return len(mm) == 1 && strings.HasPrefix(mm[0], other+": ") && strings.Contains(mm[0], "units.managed")
		})
	}
	t.Logf("m1 sees: %v", a.Sup.Status().ConfigMismatch)
	recs, _, err := group.ReadMembers(context.Background(), w.Admin, a.Sup.Keys())
	if err != nil {
		t.Fatal(err)
	}
	fa, fb := recs["m1"].Fingerprint, recs["m2"].Fingerprint
	if fa == "" || fb == "" || fa == fb || recs["m1"].Agree == nil || recs["m1"].Agree.EtcdCluster == "" {
		t.Fatalf("records: m1 fingerprint %q agree %+v, m2 fingerprint %q: want both set, different, with the etcd cluster ID", fa, recs["m1"].Agree, fb)
	}
	assertNoOverlap(t, a, b)
}

// TestMissingPeerIsReported: a peer configured into another group (here
// another cluster name) leads there unseen; a node that expects it reports
// it after a TTL in Status and /healthz, and stops when the record shows.
func TestMissingPeerIsReported(t *testing.T) {
	w := newWorld(t)
	peers := func(c *config.Config) { c.Peers = []string{"m1", "m2", "m3"} }
	start := time.Now()
	a := w.Start("m1", peers)
	stray := w.Start("m2", func(c *config.Config) { peers(c); c.Cluster = "elsewhere" })
	c := w.Start("m3", peers)
	// Each group elects its own leader: m2 alone in "elsewhere".
	leaderOf(t, stray)
	leaderOf(t, a, c)
	waitFor(t, "m1 reports m2 missing", 20*time.Second, func() bool {
		return slices.Equal(a.Sup.Status().MissingPeers, []string{"m2"})
	})
	if took := time.Since(start); took < ttl {
		t.Fatalf("m2 reported missing after %s, before a TTL (%s) had passed", took, ttl)
	}
	srv := httptest.NewServer(httpapi.New(source{a.Sup}, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "warning: expected peer without a member record: m2") {
		t.Fatalf("/healthz: %d %q; want 200 with a warning naming m2", resp.StatusCode, body)
	}
	st, _ := json.Marshal(a.Sup.Status())
	if !strings.Contains(string(st), `"missing_peers":["m2"]`) {
		t.Fatalf("status JSON %s lacks missing_peers", st)
	}
	t.Logf("/healthz: %q", body)
	// The stray member comes back into the group: the report ends.
	stray.Cancel()
	_ = stray.WaitExit(t, 15*time.Second, "stop")
	w.Start("m2", peers)
	waitFor(t, "m1 no longer reports m2 missing", 20*time.Second, func() bool {
		return len(a.Sup.Status().MissingPeers) == 0
	})
}

type source struct{ sup *supervisor.Supervisor }

func (s source) Status() any         { return s.sup.Status() }
func (s source) Active() bool        { return s.sup.Status().Active() }
func (s source) LastTick() time.Time { return s.sup.Status().LastTick }
func (s source) Warnings() []string  { return s.sup.Status().Warnings() }
func (s source) Standby() bool       { return s.sup.Status().State == group.Standby }
