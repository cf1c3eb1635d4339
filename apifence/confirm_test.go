package apifence

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// admissionServer stands in for one apiserver as the confirmation sees it:
// the parameter (shared by all of them: it lives in etcd), the dry-run
// event create judged by the token its admission cache holds, and /readyz.
type admissionServer struct {
	param  *paramServer
	mu     *sync.Mutex
	cached func() string // the token this apiserver's admission cache holds
	etcdOK bool          // what /readyz?verbose says of its etcd check
	// webhookDown: its node's supervisor is stopped (or frozen: the call
	// fails after webhookHang), so every managed write the policy admits
	// gets the apiserver's failure to call the token webhook. The policy
	// runs first (ValidatingAdmissionPolicy before the webhooks): what it
	// refuses never reaches the webhook.
	webhookDown bool
	webhookHang time.Duration
}

func (s *admissionServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.URL.Path == "/readyz":
		if s.etcdOK {
			fmt.Fprintln(w, "[+]ping ok\n[+]etcd ok\nreadyz check passed")
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed")
	case strings.HasSuffix(r.URL.Path, "/events") && r.Method == http.MethodPost:
		var got string
		for k, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(k), "impersonate-extra-") && len(v) > 0 {
				got = v[0]
			}
		}
		if got == s.cached() && s.webhookDown {
			why := "dial tcp 127.0.0.1:16443: connect: connection refused"
			if s.webhookHang > 0 {
				s.mu.Unlock()
				time.Sleep(s.webhookHang)
				s.mu.Lock()
				why = "context deadline exceeded"
			}
			st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 500,
				Reason: metav1.StatusReasonInternalError, Message: `Internal error occurred: failed calling webhook "` + WebhookName +
					`": failed to call webhook: Post "https://127.0.0.1:16443/validate?timeout=1s": ` + why}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			_ = json.NewEncoder(w).Encode(&st)
			return
		}
		if got == s.cached() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintln(w, `{"kind":"Event","apiVersion":"v1"}`)
			return
		}
		st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: 422,
			Reason: metav1.StatusReasonInvalid, Message: "events is forbidden: ValidatingAdmissionPolicy '" + PolicyName + "' denied request"}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(422)
		_ = json.NewEncoder(w).Encode(&st)
	default:
		s.param.ServeHTTP(w, r)
	}
}

func endpoint(t *testing.T, h http.Handler) *rest.Config {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// deadEndpoint is an apiserver nobody can reach (the cut rack's).
func deadEndpoint(t *testing.T) *rest.Config {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	host := srv.URL
	srv.Close()
	return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// silentEndpoint is an apiserver that takes connections and never answers
// (a frozen one, or one behind a link that drops every packet after the
// handshake).
func silentEndpoint(t *testing.T) *rest.Config {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return &rest.Config{Host: "https://" + ln.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// The rack cut in token mode (scenario 55): the new leader cannot reach
// the cut master's apiserver, or reaches one that has lost etcd and whose
// cache keeps the old token. Neither can store a write, so neither may
// hold the promotion up; an apiserver that still has etcd but has not
// caught up must.
func TestConfirmExcusesOnlyApiserversThatCannotStoreAWrite(t *testing.T) {
	newParam := func() *paramServer {
		p := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "5", "group": "lab"}}}
		p.cm.Name, p.cm.Namespace = ParamName, Namespace
		return p
	}
	live := func(p *paramServer, mu *sync.Mutex) *admissionServer {
		return &admissionServer{param: p, mu: mu, etcdOK: true, cached: func() string { return p.cm.Data["token"] }}
	}
	stale := func(p *paramServer, mu *sync.Mutex, etcdOK bool) *admissionServer {
		return &admissionServer{param: p, mu: mu, etcdOK: etcdOK, cached: func() string { return "5" }}
	}
	for _, tc := range []struct {
		name    string
		others  func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config
		wantErr bool
		excused int
	}{
		{"every apiserver confirms", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			return []*rest.Config{endpoint(t, live(p, mu))}
		}, false, 0},
		{"one unreachable", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			return []*rest.Config{deadEndpoint(t)}
		}, false, 1},
		{"one without etcd, its cache stale", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			return []*rest.Config{endpoint(t, stale(p, mu, false))}
		}, false, 1},
		{"one with etcd, its cache stale", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			return []*rest.Config{endpoint(t, stale(p, mu, true))}
		}, true, 0},
		// Issue 23 item 5a: a stopped supervisor's apiserver refuses every
		// managed write (failurePolicy Fail) with a healthy /readyz.
		// The policy refuses the old token first; the new one, admitted by
		// the policy, fails at the webhook (scenarios 51 and 52 on the real
		// plane: every promotion failed until the other master came back).
		{"one whose node's webhook is down", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			s := live(p, mu)
			s.webhookDown = true
			return []*rest.Config{endpoint(t, s)}
		}, false, 1},
		{"one whose node's webhook is down, its cache stale", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			s := stale(p, mu, true)
			s.webhookDown = true
			return []*rest.Config{endpoint(t, s)}
		}, false, 1},
		// Its node's supervisor frozen: the apiserver's call to the webhook
		// hangs until the registration's timeout (WebhookTimeout).
		{"one whose node's webhook hangs", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			s := live(p, mu)
			s.webhookDown, s.webhookHang = true, time.Duration(WebhookTimeoutSeconds)*time.Second
			return []*rest.Config{endpoint(t, s)}
		}, false, 1},
		// Issue 23 item 5d: frozen, or every packet dropped.
		{"one that never answers", func(t *testing.T, p *paramServer, mu *sync.Mutex) []*rest.Config {
			return []*rest.Config{silentEndpoint(t)}
		}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
			defer cancel()
			p, mu := newParam(), &sync.Mutex{}
			eps := append([]*rest.Config{endpoint(t, live(p, mu))}, tc.others(t, p, mu)...)
			pub := &Publisher{Endpoints: eps, Group: "lab", Poll: 20 * time.Millisecond}
			got, err := pub.Publish(ctx, 9)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("published through an apiserver that has etcd and still admits the old token: %+v", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if len(got.Excused) != tc.excused {
				t.Fatalf("excused %v, want %d", got.Excused, tc.excused)
			}
			t.Logf("published in %v, excused %v", got.Took.Round(time.Millisecond), got.Excused)
		})
	}
}
