package httpapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a gauge or counter.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Counter != nil:
		return d.Counter.GetValue()
	}
	t.Fatalf("%v is neither gauge nor counter", m.Desc())
	return 0
}

type fakeStatus struct {
	Node  string `json:"node"`
	State string `json:"state"`
	Token int64  `json:"token"`
}

type fakeSource struct {
	mu      sync.Mutex
	status  fakeStatus
	active  bool
	standby bool
	tick    time.Time
}

func (f *fakeSource) Status() any         { f.mu.Lock(); defer f.mu.Unlock(); return f.status }
func (f *fakeSource) Active() bool        { f.mu.Lock(); defer f.mu.Unlock(); return f.active }
func (f *fakeSource) LastTick() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.tick }
func (f *fakeSource) Standby() bool       { f.mu.Lock(); defer f.mu.Unlock(); return f.standby }

func get(t *testing.T, h http.Handler, method, path string) (int, string, http.Header) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func TestLeader(t *testing.T) {
	src := &fakeSource{}
	h := New(src, nil)
	for _, tc := range []struct {
		active bool
		code   int
	}{{true, 200}, {false, 503}, {true, 200}} {
		src.mu.Lock()
		src.active = tc.active
		src.mu.Unlock()
		for _, m := range []string{http.MethodGet, http.MethodHead} {
			if code, _, _ := get(t, h, m, "/leader"); code != tc.code {
				t.Errorf("%s /leader with active=%v: %d, want %d", m, tc.active, code, tc.code)
			}
		}
	}
	if code, _, _ := get(t, h, http.MethodPost, "/leader"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /leader: %d, want 405", code)
	}
}

// TestStandby: 200 only on a standby whose loop is fresh, for load
// balancers that want the members ready to take over.
func TestStandby(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeSource{}
	h := New(src, nil, WithStaleAfter(3*time.Second), withClock(func() time.Time { return now }))
	for _, tc := range []struct {
		name    string
		standby bool
		tick    time.Time
		code    int
		body    string
	}{
		{"leader or starting", false, now, 503, "not standby"},
		{"healthy standby", true, now.Add(-time.Second), 200, "standby"},
		{"standby, loop stale", true, now.Add(-4 * time.Second), 503, "unhealthy"},
		{"standby, never ticked", true, time.Time{}, 503, "unhealthy"},
	} {
		src.mu.Lock()
		src.standby, src.tick = tc.standby, tc.tick
		src.mu.Unlock()
		code, body, _ := get(t, h, http.MethodGet, "/standby")
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.name, code, body, tc.code, tc.body)
		}
	}
	if code, _, _ := get(t, h, http.MethodHead, "/standby"); code != 503 {
		t.Errorf("HEAD /standby on a stale standby: %d, want 503", code)
	}
}

func TestHealthz(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := &fakeSource{}
	h := New(src, nil, WithStaleAfter(3*time.Second), withClock(func() time.Time { return now }))
	for _, tc := range []struct {
		name string
		tick time.Time
		code int
		body string
	}{
		{"never ticked", time.Time{}, 503, "has not run yet"},
		{"fresh", now.Add(-400 * time.Millisecond), 200, "ok: last reconcile 400ms ago"},
		{"at the limit", now.Add(-3 * time.Second), 200, "ok"},
		{"stale", now.Add(-3*time.Second - time.Millisecond), 503, "unhealthy: last reconcile 3.001s ago (limit 3s)"},
		{"very stale", now.Add(-time.Hour), 503, "unhealthy"},
	} {
		src.mu.Lock()
		src.tick = tc.tick
		src.mu.Unlock()
		code, body, _ := get(t, h, http.MethodGet, "/healthz")
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %q, want %d containing %q", tc.name, code, body, tc.code, tc.body)
		}
	}
}

func TestHealthzRealClock(t *testing.T) {
	src := &fakeSource{tick: time.Now().Add(-10 * time.Second)}
	h := New(src, nil) // default: 3s
	if code, _, _ := get(t, h, http.MethodGet, "/healthz"); code != 503 {
		t.Fatalf("10s-old tick: %d, want 503", code)
	}
	src.mu.Lock()
	src.tick = time.Now()
	src.mu.Unlock()
	if code, _, _ := get(t, h, http.MethodGet, "/healthz"); code != 200 {
		t.Fatalf("fresh tick: %d, want 200", code)
	}
}

func TestStatus(t *testing.T) {
	src := &fakeSource{status: fakeStatus{Node: "m1", State: "active", Token: 1234}}
	code, body, hdr := get(t, New(src, nil), http.MethodGet, "/status")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/status: %d %s", code, hdr.Get("Content-Type"))
	}
	var got fakeStatus
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/status body %q: %v", body, err)
	}
	if got != src.status {
		t.Fatalf("/status = %+v, want %+v", got, src.status)
	}
}

type badSource struct{ fakeSource }

func (*badSource) Status() any { return map[string]any{"f": func() {}} }

func TestStatusEncodeError(t *testing.T) {
	if code, _, _ := get(t, New(&badSource{}, nil), http.MethodGet, "/status"); code != 500 {
		t.Fatalf("unencodable status: %d, want 500", code)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, WithUnits("kube-scheduler.service", "kube-controller-manager.service"), WithVersion("1.2.3"),
		WithEndpoints("http://e1:2379", "http://e2:2379"))
	if err != nil {
		t.Fatal(err)
	}
	_, fresh, _ := get(t, New(&fakeSource{}, reg), http.MethodGet, "/metrics")
	m.Transition("standby", "promoting", "won")
	m.Transition("promoting", "active", "units_started")
	m.Fenced("deadline")
	m.SetUnitActive("kube-scheduler.service", true)
	m.SetUnitActive("kube-controller-manager.service", false)
	m.Renewed("election", "http://e1:2379", 3*time.Millisecond, nil)
	m.Renewed("member", "", 0, errors.New("timeout"))
	m.SetLease(6100*time.Millisecond, 3500*time.Millisecond, true)

	_, body, _ := get(t, New(&fakeSource{}, reg), http.MethodGet, "/metrics")
	for _, want := range []string{
		`kha_role{role="active"} 1`,
		`kha_role{role="standby"} 0`,
		`kha_role{role="promoting"} 0`,
		`kha_role{role="fencing"} 0`,
		`kha_lease_time_left_seconds 6.1`,
		`kha_fence_slack_seconds 3.5`,
		`kha_transitions_total{from="standby",reason="won",to="promoting"} 1`,
		`kha_transitions_total{from="promoting",reason="units_started",to="active"} 1`,
		`kha_fences_total{reason="deadline"} 1`,
		`kha_unit_active{unit="kube-scheduler.service"} 1`,
		`kha_unit_active{unit="kube-controller-manager.service"} 0`,
		`kha_renew_duration_seconds_bucket{endpoint="http://e1:2379",lease="election",le="0.001"} 0`,
		`kha_renew_duration_seconds_bucket{endpoint="http://e1:2379",lease="election",le="0.005"} 1`,
		`kha_renew_duration_seconds_bucket{endpoint="http://e1:2379",lease="election",le="2"} 1`,
		`kha_renew_duration_seconds_count{endpoint="http://e1:2379",lease="election"} 1`,
		`kha_renew_duration_seconds_count{endpoint="http://e2:2379",lease="election"} 0`,
		`kha_renew_duration_seconds_count{endpoint="http://e2:2379",lease="member"} 0`,
		`kha_renew_failures_total{lease="member"} 1`,
		`kha_renew_failures_total{lease="election"} 0`,
		`kha_build_info{goversion="` + runtime.Version() + `",version="1.2.3"} 1`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
		`go_build_info{`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	// Every counter exists at 0 before its first event, so increase() and
	// rate() see the first fence or failure.
	for _, want := range []string{
		`kha_fences_total{reason="deadline"} 0`,
		`kha_fences_total{reason="key_lost"} 0`,
		`kha_fences_total{reason="lease_lost"} 0`,
		`kha_renew_failures_total{lease="member"} 0`,
		`kha_transitions_total{from="active",reason="deadline",to="fencing"} 0`,
		`kha_renew_duration_seconds_count{endpoint="http://e1:2379",lease="member"} 0`,
		`kha_renew_duration_seconds_count{endpoint="http://e2:2379",lease="election"} 0`,
		`kha_dropin_mismatch{unit="kube-scheduler.service"} 0`,
		`kha_stray_processes{unit="kube-controller-manager.service"} 0`,
	} {
		if !strings.Contains(fresh, want+"\n") {
			t.Errorf("fresh /metrics lacks %q", want)
		}
	}
	// No deadline before the lease is held: the slack is absent, not 0.
	if strings.Contains(fresh, "kha_fence_slack_seconds ") {
		t.Errorf("fresh /metrics has a fence slack:\n%s", fresh)
	}

	// Exactly one role is 1 at a time, including a role outside Roles.
	m.SetRole("frozen-standby")
	if got := value(t, m.Role.WithLabelValues("frozen-standby")); got != 1 {
		t.Errorf("new role = %v, want 1", got)
	}
	if got := value(t, m.Role.WithLabelValues("active")); got != 0 {
		t.Errorf("previous role = %v after SetRole, want 0", got)
	}
	m.SetLease(-time.Second, -200*time.Millisecond, true)
	if got := value(t, m.LeaseTimeLeft); got != 0 {
		t.Errorf("lapsed lease time left = %v, want 0", got)
	}
	if got, ok := m.fenceSlack.get(); !ok || got != -0.2 {
		t.Errorf("overrun fence slack = %v (present %v), want -0.2", got, ok)
	}
	// Back to standby: the slack goes away.
	m.SetLease(0, 0, false)
	if _, body, _ := get(t, New(&fakeSource{}, reg), http.MethodGet, "/metrics"); strings.Contains(body, "kha_fence_slack_seconds ") {
		t.Errorf("a standby exports a fence slack")
	}

	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice in one registry succeeded")
	}
	if m, err := NewMetrics(nil); err != nil || value(t, m.Role.WithLabelValues("standby")) != 0 {
		t.Errorf("NewMetrics(nil): %v", err)
	}
}

type problemSource struct {
	*fakeSource
	probs []string
}

func (p problemSource) Problems() []string { return p.probs }

// A member that names a problem making it unfit to lead (a managed unit's
// drop-in overridden) fails /healthz with the problem, however fresh its loop.
func TestHealthzNamesProblems(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := problemSource{fakeSource: &fakeSource{tick: now}, probs: []string{"kube-scheduler.service: ExecStartPre has no guard"}}
	h := New(src, nil, withClock(func() time.Time { return now }))
	code, body, _ := get(t, h, http.MethodGet, "/healthz")
	if code != 503 || !strings.Contains(body, "unhealthy: kube-scheduler.service: ExecStartPre") {
		t.Fatalf("/healthz = %d %q, want 503 naming the problem", code, body)
	}
	src.fakeSource.standby = true
	if code, body, _ := get(t, h, http.MethodGet, "/standby"); code != 503 || !strings.Contains(body, "will not take over: kube-scheduler.service") {
		t.Fatalf("/standby with a problem = %d %q, want 503 naming it", code, body)
	}
	src.probs = nil
	h = New(src, nil, withClock(func() time.Time { return now }))
	if code, body, _ := get(t, h, http.MethodGet, "/healthz"); code != 200 {
		t.Fatalf("/healthz without problems = %d %q", code, body)
	}
}

// TestGroupLabels: through WithGroupLabels every series on /metrics, the
// runtime's and the group gauges included, carries the group's identity,
// so that rules can tell two groups in one Prometheus apart.
func TestGroupLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	wrapped := WithGroupLabels(reg, "prod", "/kha-supervisor")
	if _, err := NewMetrics(wrapped, WithUnits("kube-scheduler.service")); err != nil {
		t.Fatal(err)
	}
	g, err := NewGroupMetrics(wrapped)
	if err != nil {
		t.Fatal(err)
	}
	g.Set(1, 2, 0)
	_, body, _ := get(t, New(&fakeSource{}, reg), http.MethodGet, "/metrics")
	for _, want := range []string{
		`kha_role{cluster="prod",prefix="/kha-supervisor",role="active"} 0`,
		`kha_config_mismatch_members{cluster="prod",prefix="/kha-supervisor"} 1`,
		`kha_missing_peers{cluster="prod",prefix="/kha-supervisor"} 2`,
		`kha_eligible_members{cluster="prod",prefix="/kha-supervisor"} 0`,
		`process_start_time_seconds{cluster="prod",prefix="/kha-supervisor"} `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var lines int
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines++
		if !strings.Contains(line, `cluster="prod",`) || !strings.Contains(line, `prefix="/kha-supervisor"`) {
			t.Errorf("a series without the group labels: %s", line)
		}
	}
	if lines < 50 {
		t.Errorf("only %d series on /metrics:\n%s", lines, body)
	}
}
