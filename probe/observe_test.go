package probe

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// Probe pods must not pile up: on the real plane 5136 of them (bound pods
// of earlier probers, which nobody deleted, and unbound ones while no
// scheduler ran) made every LIST of the namespace time out at a loaded
// apiserver, and the plane never became steady again (soak of 2 December
// 16:42). observe deletes its own bound pods, any bound pod of an earlier
// prober, and its own pods left unbound longer than unboundKept (their
// records stay: the figures still count them unbound).
func TestObserveDeletesWhatWouldPileUp(t *testing.T) {
	now := time.Now()
	list := corev1.PodList{Items: []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "mine-bound", Labels: map[string]string{"app": "probe"}}, Spec: corev1.PodSpec{NodeName: "w1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "mine-fresh", Labels: map[string]string{"app": "probe"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "mine-stale", Labels: map[string]string{"app": "probe"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "earlier-bound", Labels: map[string]string{"app": "probe"}}, Spec: corev1.PodSpec{NodeName: "w2"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "earlier-unbound", Labels: map[string]string{"app": "probe"}, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "someone-else", Labels: map[string]string{"app": "other"}}, Spec: corev1.PodSpec{NodeName: "w2"}},
	}}
	var mu sync.Mutex
	var deleted []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kha-probe/pods":
			_ = json.NewEncoder(w).Encode(list)
		case r.Method == http.MethodDelete:
			mu.Lock()
			deleted = append(deleted, r.URL.Path[len("/api/v1/namespaces/kha-probe/pods/"):])
			mu.Unlock()
			_, _ = w.Write([]byte("{}"))
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	p := &Prober{Servers: []*kubeapi.Client{kubeapi.FromHTTP(srv.Client(), srv.URL)}}
	p.pods = map[string]*Pod{
		"mine-bound": {Name: "mine-bound", Created: now.Add(-time.Second)},
		"mine-fresh": {Name: "mine-fresh", Created: now.Add(-time.Second)},
		"mine-stale": {Name: "mine-stale", Created: now.Add(-3 * time.Minute)},
	}
	p.rsSeen = map[string]bool{}
	p.observe(t.Context())
	slices.Sort(deleted)
	if want := []string{"earlier-bound", "earlier-unbound", "mine-bound", "mine-stale"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
	if !p.pods["mine-stale"].Bound.IsZero() || p.pods["mine-stale"] == nil {
		t.Error("the stale pod's record changed: it must stay unbound in the figures")
	}
}
