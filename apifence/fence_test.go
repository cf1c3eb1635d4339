package apifence

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

// TestFenceGateModeOpensOnlyAfterPublishAndCutCloses: in gate mode the
// gates forward only once the term's token is published (the promotion is
// past the barrier), and a Cut closes them until the next Publish, even
// while the supervisor's term still says open.
func TestFenceGateModeOpensOnlyAfterPublishAndCutCloses(t *testing.T) {
	var hits atomic.Int64
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == paramPath { // no parameter: a gate-mode cluster without the policy
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`, http.StatusNotFound)
			return
		}
		hits.Add(1)
	}))
	defer up.Close()
	dir := t.TempDir()
	cluster, err := pki.NewCA(filepath.Join(dir, "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	f, err := New(Options{Mode: ModeGate, StateDir: state, ClientCAs: cluster.Pool(),
		Upstreams: []*rest.Config{{Host: up.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}},
		Gates:     []GateSpec{{Unit: "kube-scheduler.service", Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.SetTerm(func() fencing.Term { return openTerm(5) })
	f.Serve()
	local, err := localca.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cluster.KubeClient("system:kube-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: local.Pool(), Certificates: []tls.Certificate{cert}}}}
	url := "https://" + f.Status().Gates["kube-scheduler.service"] + "/api/v1/x"
	status := func() int {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("before Publish: %d, want 503", got)
	}
	if err := f.Publish(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != http.StatusOK {
		t.Errorf("after Publish: %d, want 200", got)
	}
	f.Cut()
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("after Cut: %d, want 503", got)
	}
	// The same term cannot reopen the gates after its Cut (a promotion's
	// Publish racing a fence).
	if err := f.Publish(context.Background(), 5); err == nil {
		t.Error("Publish of a cut term succeeded")
	}
	if got := status(); got != http.StatusServiceUnavailable {
		t.Errorf("after Cut and a late Publish: %d, want 503", got)
	}
	if hits.Load() != 1 {
		t.Errorf("%d requests reached the apiserver, want 1", hits.Load())
	}
	if st := f.Status(); st.Mode != ModeGate {
		t.Errorf("status %+v", st)
	}
}

// openTerm is a term that may act for the next hour with token, measured
// on Go's clock.
func openTerm(token int64) fencing.Term {
	return termAt(time.Now(), time.Hour, fencing.Term{State: "active", Token: token, Open: true})
}

// TestGateTerm: the gates forward only for a term that may act: open
// (promoting past the barrier, or active), with a token, and time before
// fence_at. (Fencing and demoting members publish closed terms: the
// supervisor's TestTermOpen.)
func TestGateTerm(t *testing.T) {
	now := time.Now()
	open := termAt(now, time.Second, fencing.Term{State: "active", Open: true, Token: 9})
	if tm := gateTerm(open, now); !tm.Open || tm.Token != 9 {
		t.Errorf("active: %+v, want open with token 9", tm)
	}
	for name, tm := range map[string]fencing.Term{
		"standby":         {State: "standby", Leader: "m2", LeaderToken: 11},
		"before barrier":  termAt(now, time.Second, fencing.Term{State: "promoting", Token: 9}),
		"fence at passed": termAt(now, -time.Millisecond, fencing.Term{State: "active", Open: true, Token: 9}),
		"fence at now":    termAt(now, 0, fencing.Term{State: "active", Open: true, Token: 9}),
		"no token":        termAt(now, time.Second, fencing.Term{State: "active", Open: true}),
		"no fence":        {State: "active", Open: true, Token: 9},
	} {
		if g := gateTerm(tm, now); g.Open || g.Reason == "" {
			t.Errorf("%s: %+v, want closed with a reason", name, g)
		}
	}
}

// termAt is tm with its fence instant in after now, on Go's clock.
func termAt(now time.Time, in time.Duration, tm fencing.Term) fencing.Term {
	w := fencing.Window{TTL: time.Hour, StopMax: time.Second}
	d := fencing.NewDeadlineClock(w, fencing.IdentityClock{})
	d.Renewed("election", now.Add(in-w.Span(w.TTL)), w.TTL)
	return d.Term(tm)
}

// A stranger's client retries: the supervisor hears of each process once
// (its history would otherwise grow by one event per connection).
func TestFenceTellsOfEachStrangerOnce(t *testing.T) {
	f := &Fence{}
	var heard []string
	f.OnStranger(func(unit string, p gate.Peer) { heard = append(heard, fmt.Sprintf("%s/%d", unit, p.PID)) })
	for _, pid := range []int{7, 7, 8, 7} {
		f.tellStranger("kube-scheduler.service", gate.Peer{PID: pid})
	}
	if len(heard) != 2 {
		t.Errorf("heard %v, want each PID once", heard)
	}
}

// lockedParam is paramServer (group_test.go) safe for a background writer: GET returns it,
// PUT replaces it (resourceVersion checked), and every PUT is kept.
type lockedParam struct {
	mu   sync.Mutex
	cm   kubeapi.ConfigMap
	rv   int
	puts []string // the tokens PUT
}

func (ps *lockedParam) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if r.URL.Path != paramPath {
		http.Error(w, "not here", http.StatusTeapot)
		return
	}
	switch r.Method {
	case http.MethodGet:
		ps.cm.ResourceVersion = strconv.Itoa(ps.rv)
		_ = json.NewEncoder(w).Encode(ps.cm)
	case http.MethodPut:
		var cm kubeapi.ConfigMap
		if err := json.NewDecoder(r.Body).Decode(&cm); err != nil || cm.ResourceVersion != strconv.Itoa(ps.rv) {
			http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`, http.StatusConflict)
			return
		}
		ps.rv++
		ps.cm = cm
		ps.puts = append(ps.puts, cm.Data["token"])
		_ = json.NewEncoder(w).Encode(cm)
	}
}

func (ps *lockedParam) token() (string, []string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.cm.Data["token"], slices.Clone(ps.puts)
}

// TestFenceGateModeFollowsAnInstalledParameter (issue 23 item 5e): the
// rollout installs the token policy while every master still runs in gate
// mode. A gate-mode promotion then writes its token into the parameter
// (never back to an older one, never into another group's), without
// confirming it and without holding the promotion up; with no parameter
// it writes nothing (the gate-mode test above). On the code before, the
// parameter kept the predecessor's token and an enforcing policy refused
// every write of the new term.
func TestFenceGateModeFollowsAnInstalledParameter(t *testing.T) {
	for _, tc := range []struct {
		name        string
		held, group string
		want        string
		wantPuts    int
	}{
		{"predecessor's token", "4", "lab", "5", 1},
		{"newer token kept", "7", "lab", "7", 0},
		{"another group's parameter", "4", "other", "4", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := &lockedParam{cm: kubeapi.ConfigMap{Data: map[string]string{"token": tc.held, "group": tc.group}}}
			up := httptest.NewTLSServer(ps)
			defer up.Close()
			f, err := New(Options{Mode: ModeGate, StateDir: filepath.Join(t.TempDir(), "state"), Group: "lab",
				Upstreams:      []*rest.Config{{Host: up.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}},
				ConfirmTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			start := time.Now()
			if err := f.Publish(context.Background(), 5); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("gate-mode Publish took %s: it must not wait for the parameter", took)
			}
			wait := 5 * time.Second
			if tc.wantPuts == 0 {
				wait = time.Second // no PUT may come: look once after a while
			}
			deadline := time.Now().Add(wait)
			for {
				got, puts := ps.token()
				done := tc.wantPuts > 0 && got == tc.want && len(puts) == tc.wantPuts
				if done || time.Now().After(deadline) {
					if got != tc.want || len(puts) != tc.wantPuts {
						t.Errorf("parameter token %q after PUTs %v, want %q after %d", got, puts, tc.want, tc.wantPuts)
					}
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}
