package gate

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

// upstream is a stand-in apiserver that records what reached it. The gate's
// decisions are the subject here; the real apiserver is in the kube-tagged
// test.
type upstream struct {
	srv     *httptest.Server
	hits    atomic.Int64
	mu      sync.Mutex
	headers http.Header
	handler func(w http.ResponseWriter, r *http.Request)
}

func newUpstream(t testing.TB) *upstream {
	u := &upstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		u.mu.Lock()
		u.headers = r.Header.Clone()
		h := u.handler
		u.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"kind":"Status","status":"Success"}`)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) seen() http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.headers
}

type term struct {
	mu    sync.Mutex
	seq   []Term // answers in order; the last repeats
	calls int
}

func (t *term) fn() Term {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := min(t.calls, len(t.seq)-1)
	t.calls++
	return t.seq[i]
}

func (t *term) set(seq ...Term) {
	t.mu.Lock()
	t.seq, t.calls = seq, 0
	t.mu.Unlock()
}

type fakeReviewer map[string]User

func (f fakeReviewer) Review(_ context.Context, token string) (User, error) {
	if u, ok := f[token]; ok {
		return u, nil
	}
	return User{}, errors.New("unknown token")
}

type fixture struct {
	gate    *Gate
	up      *upstream
	term    *term
	cluster *pki.CA
	local   *localca.CA
}

func newFixture(t testing.TB, with ...func(*Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	cluster, err := pki.NewCA(filepath.Join(dir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := localca.Open(filepath.Join(dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	serving, err := local.Serving("kube-scheduler.service")
	if err != nil {
		t.Fatal(err)
	}
	up := newUpstream(t)
	tm := &term{seq: []Term{{Open: true, Token: 7}}}
	cfg := Config{
		Unit: "kube-scheduler.service", Serving: serving, ClientCAs: cluster.Pool(), Term: tm.fn,
		Upstream: &rest.Config{Host: up.srv.URL, BearerToken: "supervisor-credential", TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Reviewer: fakeReviewer{"sa-token": {Name: "system:serviceaccount:kube-system:replicaset-controller",
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}}},
	}
	for _, w := range with {
		w(&cfg)
	}
	g, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { _ = g.Close() })
	return &fixture{gate: g, up: up, term: tm, cluster: cluster, local: local}
}

// client presents a cluster-CA certificate for user (none if user is "").
func (f *fixture) client(t testing.TB, ca *pki.CA, user string, groups ...string) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: f.local.Pool()}
	if user != "" {
		p, err := ca.KubeClient(user, groups...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
}

func do(t *testing.T, c *http.Client, method, url string, h http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

const tokenHeader = "Impersonate-Extra-Kha.io%2ffencing-Token"

func TestGateForwardsAsTheComponentWithTheTermsToken(t *testing.T) {
	f := newFixture(t)
	resp, body := do(t, f.client(t, f.cluster, "system:kube-scheduler"), "POST", f.gate.URL()+"/api/v1/namespaces/default/pods/p/binding", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	h := f.up.seen()
	if got := h.Get("Impersonate-User"); got != "system:kube-scheduler" {
		t.Errorf("Impersonate-User %q, want system:kube-scheduler", got)
	}
	if got := h.Values(http.CanonicalHeaderKey(tokenHeader)); len(got) != 1 || got[0] != "7" {
		t.Errorf("token extra %q, want [7] (headers %v)", got, h)
	}
	if got := h.Get("Authorization"); got != "Bearer supervisor-credential" {
		t.Errorf("Authorization %q, want the supervisor's own credential", got)
	}
	if g := h.Values("Impersonate-Group"); len(g) != 0 {
		t.Errorf("Impersonate-Group %v, want none (system:authenticated is added by the apiserver)", g)
	}
}

func TestGateStripsClientIdentityHeaders(t *testing.T) {
	f := newFixture(t)
	forged := http.Header{
		"Authorization":                         {"Bearer sa-token"},
		"Impersonate-User":                      {"admin"},
		"Impersonate-Group":                     {"system:masters"},
		tokenHeader:                             {"999"},
		"Impersonate-Uid":                       {"x"},
		"X-Remote-User":                         {"admin"},
		"X-Remote-Group":                        {"system:masters"},
		"X-Remote-Extra-Kha.io%2ffencing-Token": {"999"},
	}
	// The client certificate wins over the bearer token, as in the apiserver.
	resp, body := do(t, f.client(t, f.cluster, "system:kube-scheduler"), "POST", f.gate.URL()+"/api/v1/x", forged)
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	h := f.up.seen()
	if h.Get("Impersonate-User") != "system:kube-scheduler" || len(h.Values("Impersonate-Group")) != 0 || h.Get("Impersonate-Uid") != "" {
		t.Errorf("forged impersonation reached the apiserver: %v", h)
	}
	if got := h.Values(http.CanonicalHeaderKey(tokenHeader)); len(got) != 1 || got[0] != "7" {
		t.Errorf("token extra %q, want [7] only", got)
	}
	for k := range h {
		if strings.HasPrefix(k, "X-Remote-") {
			t.Errorf("%s reached the apiserver", k)
		}
	}
	if h.Get("Authorization") != "Bearer supervisor-credential" {
		t.Errorf("Authorization %q reached the apiserver", h.Get("Authorization"))
	}
}

func TestGateBearerTokenThroughReview(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.cluster, "")
	resp, body := do(t, c, "POST", f.gate.URL()+"/api/v1/x", http.Header{"Authorization": {"Bearer sa-token"}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %s: %s", resp.Status, body)
	}
	h := f.up.seen()
	if h.Get("Impersonate-User") != "system:serviceaccount:kube-system:replicaset-controller" || len(h.Values("Impersonate-Group")) != 0 {
		t.Errorf("service account forwarded as %q groups %v", h.Get("Impersonate-User"), h.Values("Impersonate-Group"))
	}
	before := f.up.hits.Load()
	for name, hdr := range map[string]http.Header{"no credential": nil, "unknown token": {"Authorization": {"Bearer nope"}}} {
		resp, _ := do(t, c, "GET", f.gate.URL()+"/api/v1/x", hdr)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: %s, want 401", name, resp.Status)
		}
	}
	if n := f.up.hits.Load() - before; n != 0 {
		t.Errorf("%d unauthenticated requests reached the apiserver", n)
	}
}

func TestGateRefusesACertificateFromAnotherCA(t *testing.T) {
	f := newFixture(t)
	other, err := pki.NewCA(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", f.gate.URL()+"/api/v1/x", nil)
	if resp, err := f.client(t, other, "system:kube-scheduler").Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate from another CA was accepted: %s", resp.Status)
	}
	if f.up.hits.Load() != 0 {
		t.Error("the request reached the apiserver")
	}
}

func TestGateDecisions(t *testing.T) {
	f := newFixture(t)
	c := f.client(t, f.cluster, "system:kube-scheduler")
	open, closed := Term{Open: true, Token: 7}, Term{Reason: "standby; leader is m2 (token 9)"}
	for _, tc := range []struct {
		name    string
		seq     []Term
		code    int
		reaches bool
	}{
		{"open", []Term{open}, 200, true},
		{"standby", []Term{closed}, 503, false},
		{"closed between arrival and departure", []Term{open, closed}, 503, false},
		{"new term between arrival and departure", []Term{open, {Open: true, Token: 8}}, 503, false},
	} {
		f.term.set(tc.seq...)
		before := f.up.hits.Load()
		resp, body := do(t, c, "POST", f.gate.URL()+"/api/v1/x", nil)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %s (%s), want %d", tc.name, resp.Status, body, tc.code)
		}
		if got := f.up.hits.Load() > before; got != tc.reaches {
			t.Errorf("%s: reached the apiserver = %v, want %v", tc.name, got, tc.reaches)
		}
		if tc.code == 503 && !strings.Contains(body, `"kind":"Status"`) {
			t.Errorf("%s: body %q is not a Status", tc.name, body)
		}
	}
}

// A watch streams through at once: the client reads the first event while
// the upstream is still holding the response open.
func TestGateStreamsWatchesUnbuffered(t *testing.T) {
	f := newFixture(t)
	release := make(chan struct{})
	defer close(release)
	f.up.handler = func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	req, _ := http.NewRequest("GET", f.gate.URL()+"/api/v1/pods?watch=1", nil)
	resp, err := f.client(t, f.cluster, "system:kube-scheduler").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "ADDED") {
		t.Fatalf("first event %q, %v", line, err)
	}
}

// Cut ends a watch whose client has stopped reading (its TCP window is
// full, so any TLS goodbye would block), and the upstream request with it.
func TestCutClosesEveryConnectionWithoutWaitingOnTheClient(t *testing.T) {
	f := newFixture(t)
	upDone := make(chan struct{})
	chunk := strings.Repeat("x", 64<<10)
	f.up.handler = func(w http.ResponseWriter, r *http.Request) {
		defer close(upDone)
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
	// A raw TLS client that sends the request and never reads.
	raw, err := net.Dial("tcp", f.gate.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	p, err := f.cluster.KubeClient("system:kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	tc := tls.Client(raw, &tls.Config{RootCAs: f.local.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}})
	if _, err := io.WriteString(tc, "GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Wait until the upstream is writing into full buffers.
	deadline := time.Now().Add(20 * time.Second)
	for f.up.hits.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	n := f.gate.Cut()
	took := time.Since(start)
	if n < 1 {
		t.Fatalf("Cut closed %d connections, want at least 1", n)
	}
	if took > 2*time.Second {
		t.Errorf("Cut took %s with a client that does not read", took)
	}
	select {
	case <-upDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream request still runs 20 s after Cut")
	}
	t.Logf("Cut closed %d connection(s) in %s", n, took)
	// The gate still answers after a Cut (the next term reuses it).
	f.up.handler = nil
	resp, _ := do(t, f.client(t, f.cluster, "system:kube-scheduler"), "GET", f.gate.URL()+"/api/v1/x", nil)
	if resp.StatusCode != 200 {
		t.Errorf("after Cut: %s", resp.Status)
	}
}

func TestStripIdentity(t *testing.T) {
	h := http.Header{}
	for _, k := range []string{"authorization", "Proxy-Authorization", "impersonate-user", "Impersonate-Extra-A", "x-remote-user", "X-Remote-Extra-B", "Accept"} {
		h[k] = []string{"v"}
	}
	StripIdentity(h)
	if len(h) != 1 || h["Accept"] == nil {
		t.Errorf("left %v, want only Accept", h)
	}
}

func TestListenRefusesNonLoopbackAndImpersonatingUpstream(t *testing.T) {
	f := newFixture(t)
	base := f.gate.cfg
	c := base
	c.Listen = "0.0.0.0:0"
	if _, err := Listen(c); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("non-loopback listen: %v", err)
	}
	c = base
	up := *base.Upstream
	up.Impersonate.UserName = "admin"
	c.Upstream = &up
	if _, err := Listen(c); err == nil || !strings.Contains(err.Error(), "impersonate") {
		t.Errorf("impersonating upstream: %v", err)
	}
}

// The gate passes bodies through as the apiserver sent them: it never asks
// for gzip on its own (its transport would then inflate every answer in
// the supervisor, one flate dictionary per open watch), and a component
// that asks for gzip gets the compressed bytes untouched.
func TestGateNeitherAsksForNorInflatesGzip(t *testing.T) {
	f := newFixture(t)
	f.up.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			_, _ = io.WriteString(w, "plain")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, "compressed")
		_ = zw.Close()
	}
	c := f.client(t, f.cluster, "system:kube-scheduler")
	c.Transport.(*http.Transport).DisableCompression = true // a client that does not ask
	resp, body := do(t, c, "GET", f.gate.URL()+"/api/v1/pods", nil)
	if got := f.up.seen().Get("Accept-Encoding"); got != "" || body != "plain" {
		t.Errorf("client without Accept-Encoding: upstream saw Accept-Encoding %q, body %q; want none, plain", got, body)
	}
	resp, body = do(t, c, "GET", f.gate.URL()+"/api/v1/pods", http.Header{"Accept-Encoding": {"gzip"}})
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("client asking for gzip: Content-Encoding %q, body %q; want the gzip bytes passed through", resp.Header.Get("Content-Encoding"), body)
	}
	zr, err := gzip.NewReader(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(zr); string(b) != "compressed" {
		t.Errorf("gunzipped %q, want compressed", b)
	}
}
