package apifence

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// paramServer stands in for the apiserver's ConfigMap endpoint only (the
// decision under test is the publisher's; the policy's side is tested
// against real apiservers in kube_test.go and the lab's scenario 54).
type paramServer struct {
	cm   kubeapi.ConfigMap
	puts int
}

func (s *paramServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != paramPath {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		s.puts++
		if err := json.NewDecoder(r.Body).Decode(&s.cm); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&s.cm)
}

func publisherAt(t *testing.T, s *paramServer, group string) *Publisher {
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	return &Publisher{Endpoints: []*rest.Config{{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}}, Group: group}
}

// A node configured into another group (scenario 54) must not take the
// parameter from the group that holds it, whatever its token: its
// promotion fails and it starts no unit.
func TestPublishNeverTakesTheParameterFromAnotherGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "587", "group": "lab"}}}
	s.cm.Name, s.cm.Namespace = ParamName, Namespace
	if _, err := publisherAt(t, s, "other").write(ctx, 1314); !errors.Is(err, ErrOtherGroup) {
		t.Fatalf("another group's publish: %v, want ErrOtherGroup", err)
	}
	if s.puts != 0 || s.cm.Data["token"] != "587" {
		t.Fatalf("another group wrote the parameter: %d PUTs, data %v", s.puts, s.cm.Data)
	}
	if prev, err := publisherAt(t, s, "lab").write(ctx, 1314); err != nil || prev != 587 || s.cm.Data["token"] != "1314" || s.cm.Data["group"] != "lab" {
		t.Fatalf("own group's publish: prev %d, %v, data %v", prev, err, s.cm.Data)
	}
}

// The first publisher claims a parameter without a group (installed by
// `api-fence manifests`).
func TestPublishClaimsTheParameterForItsGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := &paramServer{}
	s.cm.Name, s.cm.Namespace = ParamName, Namespace
	if _, err := publisherAt(t, s, "lab").write(ctx, 7); err != nil || s.cm.Data["group"] != "lab" || s.cm.Data["token"] != "7" {
		t.Fatalf("first publish: %v, data %v", err, s.cm.Data)
	}
}
