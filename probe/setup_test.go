package probe

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// A namespace of that name that the probe did not create is never reused:
// Cleanup would delete it with everything in it. The real apiserver's side
// is the lab's (scenario 56 runs the drill's probe against the real plane).
func TestSetupRefusesANamespaceItDidNotCreate(t *testing.T) {
	for _, c := range []struct {
		name    string
		labels  map[string]string
		foreign bool
	}{
		{"the operator's", map[string]string{"team": "a"}, true},
		{"unlabelled", nil, true},
		{"an earlier probe's", map[string]string{ownerLabel: ownerValue}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rsCreated bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces":
					var ns corev1.Namespace
					if err := json.NewDecoder(r.Body).Decode(&ns); err != nil || ns.Labels[ownerLabel] != ownerValue {
						t.Errorf("namespace sent without the owner label: %+v %v", ns.ObjectMeta, err)
					}
					w.WriteHeader(http.StatusConflict)
					_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
						Status: metav1.StatusFailure, Reason: metav1.StatusReasonAlreadyExists, Code: http.StatusConflict})
				case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/drills":
					_ = json.NewEncoder(w).Encode(corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "drills", Labels: c.labels}})
				case r.Method == http.MethodPost && r.URL.Path == "/apis/apps/v1/namespaces/drills/replicasets":
					rsCreated = true
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte("{}"))
				default:
					t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
					w.WriteHeader(http.StatusNotFound)
				}
			}))
			defer srv.Close()
			p := &Prober{Servers: []*kubeapi.Client{kubeapi.FromHTTP(srv.Client(), srv.URL)}, Namespace: "drills"}
			err := p.Setup(t.Context())
			var foreign *ForeignNamespaceError
			if got := errors.As(err, &foreign); got != c.foreign {
				t.Fatalf("Setup: %v; want a ForeignNamespaceError: %v", err, c.foreign)
			}
			if !c.foreign && (err != nil || !rsCreated) {
				t.Errorf("Setup: %v, ReplicaSet created %v; want nil, true", err, rsCreated)
			}
			if c.foreign && rsCreated {
				t.Error("ReplicaSet created in a foreign namespace")
			}
		})
	}
}
