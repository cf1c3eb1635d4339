package apifence

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

// unbound is an apiserver whose policy binding can be deleted: then every
// write is admitted, whatever token it carries.
type unbound struct {
	http.Handler
	deleted atomic.Bool
}

func (u *unbound) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.deleted.Load() && strings.HasSuffix(r.URL.Path, "/events") && r.Method == http.MethodPost {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, `{"kind":"Event","apiVersion":"v1"}`)
		return
	}
	u.Handler.ServeHTTP(w, r)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Deleting the policy's binding disables the fence silently until the
// next promotion: the leader's self-check must see it within a few
// periods and say which apiserver, and see it restored.
func TestLeaderNoticesAnApiserverThatAdmitsAStaleToken(t *testing.T) {
	param := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "5"}}}
	param.cm.Name, param.cm.Namespace = ParamName, Namespace
	var mu sync.Mutex
	cached := func() string { return param.cm.Data["token"] }
	good := &unbound{Handler: clusterServer{&admissionServer{param: param, mu: &mu, cached: cached, etcdOK: true}, nil, nil}}
	bad := &unbound{Handler: clusterServer{&admissionServer{param: param, mu: &mu, cached: cached, etcdOK: true}, nil, nil}}
	eps := []*rest.Config{endpoint(t, good), endpoint(t, bad)}
	cluster, err := pki.NewCA(filepath.Join(t.TempDir(), "cluster"))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f, err := New(Options{Mode: ModeToken, StateDir: filepath.Join(t.TempDir(), "state"), ClientCAs: cluster.Pool(), Upstreams: eps,
		ConfirmTimeout: 10 * time.Second, SelfCheckEvery: 20 * time.Millisecond, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Serve()
	if err := f.Publish(t.Context(), 9); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func(Status) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !ok(f.Status()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v", what, f.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond) // several checks with the policy in place
	if st := f.Status(); len(st.Unfenced) != 0 {
		t.Fatalf("unfenced %v with the policy bound everywhere", st.Unfenced)
	}
	bad.deleted.Store(true)
	waitFor("binding deleted on the second apiserver", func(s Status) bool { return len(s.Unfenced) == 1 && s.Unfenced[0] == eps[1].Host })
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, eps[1].Host) {
		t.Errorf("no ERROR naming %s:\n%s", eps[1].Host, l)
	}
	bad.deleted.Store(false)
	waitFor("binding restored", func(s Status) bool { return len(s.Unfenced) == 0 })
	// A standby (nothing published, or cut) vouches for nothing: from the
	// moment the cut returns, not from the next check on (a node that
	// just fenced reported "api fence is OFF" until then), and a check
	// still in flight at the cut does not bring the finding back.
	bad.deleted.Store(true)
	waitFor("binding deleted again", func(s Status) bool { return len(s.Unfenced) == 1 })
	f.Cut()
	if st := f.Status(); len(st.Unfenced) != 0 {
		t.Errorf("as the cut returns: unfenced %v", st.Unfenced)
	}
	time.Sleep(100 * time.Millisecond)
	if st := f.Status(); len(st.Unfenced) != 0 {
		t.Errorf("after the cut: unfenced %v", st.Unfenced)
	}
}
