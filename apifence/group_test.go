package apifence

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

func etcdAt(id uint64, rev int64) EtcdFunc {
	return func(context.Context) (EtcdState, error) { return EtcdState{ClusterID: id, Revision: rev}, nil }
}

// Two groups named alike on different etcd clusters count unrelated
// revisions: the second must not take the parameter from the first,
// whatever its token. The parameter records the etcd cluster ID.
func TestPublishNeverTakesTheParameterFromASameNamedGroupOnAnotherEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := &paramServer{}
	s.cm.Name, s.cm.Namespace = ParamName, Namespace
	first := publisherAt(t, s, "kube-control-plane")
	first.Etcd = etcdAt(0xa1, 100)
	if _, err := first.write(ctx, 40); err != nil || s.cm.Data["etcd_cluster"] != "a1" {
		t.Fatalf("first publish: %v, data %v (want etcd_cluster a1)", err, s.cm.Data)
	}
	other := publisherAt(t, s, "kube-control-plane")
	other.Etcd = etcdAt(0xb2, 5000)
	if _, err := other.write(ctx, 4000); !errors.Is(err, ErrOtherGroup) || !strings.Contains(err.Error(), "b2") {
		t.Fatalf("same-named group on etcd b2: %v, want ErrOtherGroup naming both clusters", err)
	}
	if s.cm.Data["token"] != "40" {
		t.Fatalf("the other etcd's group wrote token %s", s.cm.Data["token"])
	}
}

// kha's etcd restored from a snapshot without --bump-revision: every new
// election key's revision is below the parameter's token, so every
// promotion fails with ErrNewerToken forever. A token above the etcd's
// current revision cannot have come from this etcd's history: say so,
// and what to do.
func TestPublishDetectsARestoredEtcdBehindTheParameter(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "9000", "group": "lab", "etcd_cluster": "a1"}}}
	s.cm.Name, s.cm.Namespace = ParamName, Namespace
	p := publisherAt(t, s, "lab")
	p.Etcd = etcdAt(0xa1, 120) // restored: its revision is far behind 9000
	_, err := p.write(ctx, 118)
	if !errors.Is(err, ErrNewerToken) || !errors.Is(err, ErrRestored) || !strings.Contains(err.Error(), "--bump-revision") {
		t.Fatalf("restored etcd: %v, want ErrNewerToken and ErrRestored telling to restore with --bump-revision", err)
	}
	// A genuinely newer term (token below this etcd's revision) is not a
	// restore: only ErrNewerToken.
	p.Etcd = etcdAt(0xa1, 9500)
	if _, err := p.write(ctx, 8000); !errors.Is(err, ErrNewerToken) || errors.Is(err, ErrRestored) {
		t.Fatalf("a newer term: %v, want ErrNewerToken alone", err)
	}
}
