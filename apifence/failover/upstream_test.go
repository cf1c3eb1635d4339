package failover

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// server is a stand-in apiserver that echoes the request body and says who
// it is.
func server(t *testing.T, name string, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Server", name)
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func cfg(s *httptest.Server) *rest.Config {
	return &rest.Config{Host: s.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// kill stops an apiserver and drops the client's pooled connections to it,
// as the client's read loop does once the dead server's FIN arrives. (A
// request sent on a pooled connection in the instant before that fails as
// it would without failover: the transport cannot tell whether it arrived.)
func kill(set *Set, s *httptest.Server) {
	s.CloseClientConnections()
	s.Close()
	set.CloseIdleConnections()
}

func post(t *testing.T, set *Set, body string) (string, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", set.First().String()+"/api/v1/namespaces/default/events", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := set.RoundTrip(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Header.Get("X-Server"), string(b), nil
}

// TestFailoverToTheSecondWhenTheFirstIsDown: two apiservers; the first is
// killed; a write (with a body, not idempotent) goes to the second whole,
// once; the first is then skipped while held down and tried again after;
// with both down the error names both.
func TestFailoverToTheSecondWhenTheFirstIsDown(t *testing.T) {
	var hitsA, hitsB atomic.Int64
	a, b := server(t, "a", &hitsA), server(t, "b", &hitsB)
	set, err := New([]*rest.Config{cfg(a), cfg(b)}, Options{Hold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	set.now = func() time.Time { return clock }

	if who, got, err := post(t, set, "one"); err != nil || who != "a" || got != "one" {
		t.Fatalf("both up: %q %q %v, want a to answer", who, got, err)
	}
	kill(set, a)
	if who, got, err := post(t, set, "two"); err != nil || who != "b" || got != "two" {
		t.Fatalf("a killed: %q %q %v, want b to answer with the whole body", who, got, err)
	}
	if d := set.Down(); len(d) != 1 || d[0] != a.URL {
		t.Errorf("down %v, want [%s]", d, a.URL)
	}
	if who, _, err := post(t, set, "three"); err != nil || who != "b" {
		t.Fatalf("a held down: %q %v, want b", who, err)
	}
	if n := hitsB.Load(); n != 2 {
		t.Errorf("b got %d requests, want 2 (each write sent once)", n)
	}
	clock = clock.Add(2 * time.Hour) // hold over: a is tried first again, fails, b answers
	if who, _, err := post(t, set, "four"); err != nil || who != "b" {
		t.Fatalf("after the hold: %q %v, want b", who, err)
	}
	kill(set, b)
	_, _, err = post(t, set, "five")
	if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(a.URL, "https://")) || !strings.Contains(err.Error(), strings.TrimPrefix(b.URL, "https://")) {
		t.Errorf("both down: %v, want an error naming both", err)
	}
	if n := hitsA.Load(); n != 1 {
		t.Errorf("a got %d requests, want 1", n)
	}
}

// TestNoResendAfterTheRequestLeft: an apiserver that takes the request and
// then drops the connection is not sent the write again elsewhere (it may
// have been applied); the error goes back to the client.
func TestNoResendAfterTheRequestLeft(t *testing.T) {
	var hitsA, hitsB atomic.Int64
	a := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		_, _ = io.ReadAll(r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(a.Close)
	a.EnableHTTP2 = false
	b := server(t, "b", &hitsB)
	set, err := New([]*rest.Config{cfg(a), cfg(b)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := post(t, set, "once"); err == nil {
		t.Fatal("a dropped the connection after reading the write, yet no error")
	}
	if hitsB.Load() != 0 {
		t.Errorf("the write was sent again to b after a had it")
	}
	if hitsA.Load() < 1 {
		t.Errorf("a never got the write")
	}
}

func TestNewRefusesNoneAndBadHosts(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("no apiserver accepted")
	}
	if _, err := New([]*rest.Config{{Host: "not a url"}}, Options{}); err == nil || !strings.Contains(err.Error(), "not a URL") {
		t.Errorf("bad host: %v", err)
	}
}

// An apiserver whose parameter cache is behind (healed after a cut) refuses
// the new term's token with the policy's 422; nothing was stored, so the
// write goes on to the next apiserver instead of failing the component
// (issue 23 item 2). Any other answer is returned as it is.
func TestRefusedByAStaleApiserverGoesToTheNext(t *testing.T) {
	var staleHits, okHits, otherHits atomic.Int64
	refuse := func(hits *atomic.Int64, code int, msg string) *httptest.Server {
		s := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("X-Server", "refusing")
			w.WriteHeader(code)
			_, _ = io.WriteString(w, msg)
		}))
		t.Cleanup(s.Close)
		return s
	}
	denial := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"events is forbidden: ValidatingAdmissionPolicy 'kha-fencing-token' with binding 'kha-fencing-token' denied request","reason":"Invalid","code":422}`
	stale := refuse(&staleHits, http.StatusUnprocessableEntity, denial)
	ok := server(t, "second", &okHits)
	set, err := New([]*rest.Config{cfg(stale), cfg(ok)}, Options{Retry: func(code int, body []byte) bool {
		return code == http.StatusUnprocessableEntity && strings.Contains(string(body), "kha-fencing-token")
	}})
	if err != nil {
		t.Fatal(err)
	}
	who, echo, err := post(t, set, "binding")
	if err != nil || who != "second" || echo != "binding" {
		t.Fatalf("a write the first apiserver's stale policy refused: answered by %q with %q (%v), want the second's echo", who, echo, err)
	}
	if staleHits.Load() != 1 || okHits.Load() != 1 {
		t.Errorf("hits: stale %d, second %d; want 1 and 1", staleHits.Load(), okHits.Load())
	}
	// With no other apiserver to give a better answer (the next one is
	// down), the refusal is the answer, not the dial error.
	set3, err := New([]*rest.Config{cfg(stale), deadConfig(t)}, Options{Retry: func(code int, body []byte) bool {
		return code == http.StatusUnprocessableEntity && strings.Contains(string(body), "kha-fencing-token")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if who, echo, err := post(t, set3, "binding"); err != nil || who != "refusing" || !strings.Contains(echo, "kha-fencing-token") {
		t.Errorf("refused, next apiserver down: answered by %q with %q (%v), want the refusal", who, echo, err)
	}
	// An apiserver that cannot call its node's token webhook (that
	// supervisor stopped or frozen) refuses with 500: nothing was stored,
	// so the write goes on too, when Retry says so.
	var hookHits, ok2Hits atomic.Int64
	hook := refuse(&hookHits, http.StatusInternalServerError, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Internal error occurred: failed calling webhook \"kha-fencing-token.kha.io\": failed to call webhook: context deadline exceeded","reason":"InternalError","code":500}`)
	set4, err := New([]*rest.Config{cfg(hook), cfg(server(t, "second", &ok2Hits))}, Options{Retry: func(code int, body []byte) bool {
		return code == http.StatusInternalServerError && strings.Contains(string(body), "failed calling webhook")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if who, echo, err := post(t, set4, "binding"); err != nil || who != "second" || echo != "binding" {
		t.Errorf("refused for want of the webhook: answered by %q with %q (%v), want the second's echo", who, echo, err)
	}
	// Another 422 (a real validation error) is the answer.
	other := refuse(&otherHits, http.StatusUnprocessableEntity, `{"kind":"Status","message":"Pod \"x\" is invalid","reason":"Invalid","code":422}`)
	set2, err := New([]*rest.Config{cfg(other), cfg(ok)}, Options{Retry: func(code int, body []byte) bool {
		return code == http.StatusUnprocessableEntity && strings.Contains(string(body), "kha-fencing-token")
	}})
	if err != nil {
		t.Fatal(err)
	}
	if who, _, _ := post(t, set2, "pod"); who != "refusing" || okHits.Load() != 1 {
		t.Errorf("a validation error went on to %q (second's hits %d)", who, okHits.Load())
	}
}

// deadConfig is an apiserver nothing listens on.
func deadConfig(t *testing.T) *rest.Config {
	s := httptest.NewTLSServer(http.NotFoundHandler())
	u := s.URL
	s.Close()
	return &rest.Config{Host: u, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}
