package health

import (
	"context"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// server answers /healthz with the status in code (200 by default), or
// hangs while hang is set.
type server struct {
	code atomic.Int32
	hang atomic.Bool
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.hang.Load() {
		<-r.Context().Done()
		return
	}
	c := int(s.code.Load())
	if c == 0 {
		c = http.StatusOK
	}
	w.WriteHeader(c)
	_, _ = w.Write([]byte("ok"))
}

func tlsServer(t *testing.T) (*server, *httptest.Server, *x509.CertPool) {
	t.Helper()
	s := &server{}
	ts := httptest.NewTLSServer(s)
	t.Cleanup(ts.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ts.Certificate())
	return s, ts, pool
}

func TestCheckerHTTP(t *testing.T) {
	s := &server{}
	ts := httptest.NewServer(s)
	defer ts.Close()
	c, err := NewChecker(ts.URL+"/healthz", TLS{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Check(context.Background()); !r.OK || r.Code != 200 || r.Latency <= 0 {
		t.Fatalf("healthy server: %+v", r)
	}
	s.code.Store(http.StatusInternalServerError)
	if r := c.Check(context.Background()); r.OK || r.Code != 500 || !strings.Contains(r.Error, "HTTP 500") {
		t.Fatalf("500: %+v", r)
	}
}

func TestCheckerTLS(t *testing.T) {
	_, ts, pool := tlsServer(t)
	url := ts.URL + "/healthz"
	for _, tc := range []struct {
		name string
		tls  TLS
		ok   bool
	}{
		{"the server's CA", TLS{Roots: pool}, true},
		{"insecure", TLS{Insecure: true}, true},
		{"another CA", TLS{Roots: x509.NewCertPool()}, false},
	} {
		c, err := NewChecker(url, tc.tls, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := c.Check(context.Background())
		if r.OK != tc.ok {
			t.Errorf("%s: %+v, want ok=%v", tc.name, r, tc.ok)
		}
		if !tc.ok && !strings.Contains(r.Error, "certificate") {
			t.Errorf("%s: error %q does not name the certificate", tc.name, r.Error)
		}
	}
}

func TestCheckerRefuses(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:10259/healthz", "ftp://x/", "/healthz", "::"} {
		if _, err := NewChecker(u, TLS{}, time.Second); err == nil {
			t.Errorf("%s accepted without CA or insecure", u)
		}
	}
	if _, err := NewChecker("http://x/", TLS{}, 0); err == nil {
		t.Error("zero timeout accepted")
	}
}

func TestCheckerTimeout(t *testing.T) {
	s, ts, pool := tlsServer(t)
	s.hang.Store(true)
	c, _ := NewChecker(ts.URL, TLS{Roots: pool}, 100*time.Millisecond)
	start := time.Now()
	r := c.Check(context.Background())
	if r.OK || !strings.Contains(r.Error, "no answer within 100ms") {
		t.Fatalf("hung server: %+v", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a 100ms timeout took %s", d)
	}
}

// waitFor polls cond for up to 10 s (generous: a busy machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func newProbe(t *testing.T, spec Spec) (*server, *Probe) {
	s, ts, pool := tlsServer(t)
	c, err := NewChecker(ts.URL+"/healthz", TLS{Roots: pool}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	spec.Unit = "kube-scheduler.service"
	return s, NewProbe(spec, c)
}

// A failing probe counts only at the threshold, then every failure counts;
// a success makes it healthy again.
func TestProbeThreshold(t *testing.T) {
	s, p := newProbe(t, Spec{Interval: 10 * time.Millisecond, Threshold: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Arm(ctx)
	defer p.Disarm()
	waitFor(t, "healthy", func() bool { return p.Report().State == StateHealthy })
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("healthy probe took %d failures", n)
	}
	s.code.Store(http.StatusServiceUnavailable)
	waitFor(t, "unhealthy", func() bool { return p.Report().State == StateUnhealthy })
	waitFor(t, "three strikes", func() bool { return p.Report().Consecutive >= 5 })
	n, last := p.Take()
	if c := p.Report().Consecutive; n < 3 || n > c-2 {
		t.Fatalf("took %d failures at %d consecutive (threshold 3: want consecutive-2)", n, c)
	}
	if last.OK || last.Code != http.StatusServiceUnavailable || last.InARow < 3 {
		t.Fatalf("last strike %+v", last)
	}
	s.code.Store(http.StatusOK)
	waitFor(t, "healthy again", func() bool { return p.Report().State == StateHealthy })
	p.Take()
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("healthy again, took %d", n)
	}
	if r := p.Report(); r.HealthySince.IsZero() || r.Failures < 5 || r.Probes <= r.Failures {
		t.Fatalf("report %+v", r)
	}
}

// Within its grace a probe that never succeeded does not count failures;
// after the grace it does; a success ends the grace early.
func TestProbeGrace(t *testing.T) {
	// The grace runs from Arm, so the clock starts before it: whatever the
	// first probe costs on a loaded machine, "unhealthy" may not come
	// before the grace is up. 2 s, so that a first probe delayed that long
	// is the only way to miss the state within it.
	const grace = 2 * time.Second
	s, p := newProbe(t, Spec{Interval: 10 * time.Millisecond, Threshold: 2, Grace: grace})
	s.code.Store(http.StatusServiceUnavailable)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	armed := time.Now()
	p.Arm(ctx)
	defer p.Disarm()
	waitFor(t, "a failed probe", func() bool { r := p.Report(); return r.Last != nil && !r.Last.OK })
	if st := p.Report().State; st != StateStarting {
		t.Fatalf("within grace (%s after arming): state %s", time.Since(armed), st)
	}
	waitFor(t, "unhealthy after the grace", func() bool { return p.Report().State == StateUnhealthy })
	if d := time.Since(armed); d < grace {
		t.Fatalf("unhealthy %s after arming, inside a %s grace", d, grace)
	}

	// Re-armed (the unit restarted), it gets a fresh grace; once it
	// succeeded, failures count at once.
	s.code.Store(http.StatusOK)
	p.Rearm(ctx)
	waitFor(t, "healthy", func() bool { return p.Report().State == StateHealthy })
	s.code.Store(http.StatusServiceUnavailable)
	waitFor(t, "unhealthy with the grace ended by a success", func() bool { return p.Report().State == StateUnhealthy })
}

// A disarmed probe does not probe and forgets its failures.
func TestProbeDisarm(t *testing.T) {
	s, p := newProbe(t, Spec{Interval: 10 * time.Millisecond, Threshold: 1})
	s.code.Store(http.StatusServiceUnavailable)
	p.Arm(context.Background())
	waitFor(t, "unhealthy", func() bool { return p.Report().State == StateUnhealthy })
	p.Disarm()
	if n, _ := p.Take(); n != 0 {
		t.Fatalf("disarmed, took %d", n)
	}
	before := p.Report().Probes
	time.Sleep(100 * time.Millisecond)
	if r := p.Report(); r.State != StateOff || r.Probes > before+1 {
		t.Fatalf("disarmed probe: %+v (probes before %d)", r, before)
	}
}

func TestSet(t *testing.T) {
	_, ts, pool := tlsServer(t)
	set, err := NewSet([]Target{{"a.service", ts.URL}, {"b.service", ts.URL}}, Settings{TLS: TLS{Roots: pool}, Interval: 10 * time.Millisecond, Timeout: time.Second, Threshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	set.Arm(context.Background(), "b.service")
	set.Arm(context.Background(), "c.service") // no probe: nothing
	defer set.DisarmAll()
	waitFor(t, "b healthy", func() bool { return set.Probe("b.service").Report().State == StateHealthy })
	r := set.Reports()
	if len(r) != 2 || r[0].Unit != "a.service" || r[0].State != StateOff || r[1].State != StateHealthy {
		t.Fatalf("reports %+v", r)
	}
	var none *Set
	none.DisarmAll()
	if none.Reports() != nil || none.Probe("a.service") != nil {
		t.Fatal("nil set")
	}
	if _, err := NewSet([]Target{{"a.service", "https://x/"}}, Settings{Timeout: time.Second}); err == nil {
		t.Fatal("https without CA accepted")
	}
}

func TestCollector(t *testing.T) {
	reports := []Report{
		{Unit: "a.service", State: StateUnhealthy, Consecutive: 4, Probes: 10, Failures: 4, Last: &Result{Latency: 1500 * time.Millisecond}},
		{Unit: "b.service", State: StateOff},
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(func() []Report { return reports }))
	want := `
# HELP kha_health_probe_consecutive_failures Failed health probes of the unit in a row (0 while not probing).
# TYPE kha_health_probe_consecutive_failures gauge
kha_health_probe_consecutive_failures{unit="a.service"} 4
kha_health_probe_consecutive_failures{unit="b.service"} 0
# HELP kha_health_probe_healthy 1 while the unit's health probe passes, 0 while it is starting or unhealthy; absent while not probing (standby, unit stopped).
# TYPE kha_health_probe_healthy gauge
kha_health_probe_healthy{unit="a.service"} 0
# HELP kha_health_probe_latency_seconds How long the unit's last health probe took (to its answer or its timeout); absent before the first.
# TYPE kha_health_probe_latency_seconds gauge
kha_health_probe_latency_seconds{unit="a.service"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kha_health_probe_healthy", "kha_health_probe_consecutive_failures", "kha_health_probe_latency_seconds"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "kha_health_probes_total", "kha_health_probe_failures_total"); err != nil || n != 4 {
		t.Fatalf("counters: %d series, %v", n, err)
	}
}

// countingServer hangs every request and counts those waiting.
type countingServer struct{ waiting atomic.Int32 }

func (s *countingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	<-r.Context().Done()
}

// A probe whose timeout is longer than its interval does not wait for the
// one in flight: the next starts on time, so a hung unit is found after
// timeout + (threshold-1) x interval of silence rather than threshold x
// timeout (the fast profile's 1.5 s instead of 3 s). At most
// ceil(timeout/interval) wait at once.
func TestProbesOverlapWhenTheTimeoutIsLonger(t *testing.T) {
	s := &countingServer{}
	ts := httptest.NewServer(s)
	defer ts.Close()
	c, err := NewChecker(ts.URL+"/healthz", TLS{}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProbe(Spec{Unit: "u", Interval: 100 * time.Millisecond, Threshold: 3}, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p.Arm(ctx)
	defer p.Disarm()
	deadline := time.Now().Add(10 * time.Second)
	for s.waiting.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes waiting at once after 10 s, want 3: each probe waits for the one before", s.waiting.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if n, most := s.waiting.Load(), int32(maxInFlight(2*time.Second, 100*time.Millisecond)); n > most {
		t.Fatalf("%d probes waiting at once, want at most %d", n, most)
	}
}
