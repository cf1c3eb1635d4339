package plane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
)

// failingLists is a clientset whose first n LISTs fail, as an apiserver
// still cut from etcd answers.
func failingLists(n int) kubernetes.Interface {
	c := fake.NewClientset()
	c.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if n > 0 {
			n--
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	return c
}

func TestQuietGatePassesAQuietPlaneAtOnce(t *testing.T) {
	r := &Runner{Clients: []kubernetes.Interface{fake.NewClientset(), fake.NewClientset()}}
	if note := r.quiet(context.Background(), time.Minute); note != "" {
		t.Fatalf("a quiet plane got the note %q", note)
	}
}

func TestQuietGateWaitsForASlowAPIServerAndSaysSo(t *testing.T) {
	// Five failed rounds (2.5 s) then three good ones: the wait is noted
	// and names the apiserver that held it up.
	r := &Runner{Clients: []kubernetes.Interface{fake.NewClientset(), failingLists(5)}}
	note := r.quiet(context.Background(), time.Minute)
	if !strings.Contains(note, "waited") || !strings.Contains(note, "m2 pods") {
		t.Fatalf("note %q: want the wait and the slow apiserver (m2 pods)", note)
	}
}

func TestQuietGateGivesUpWithANote(t *testing.T) {
	r := &Runner{Clients: []kubernetes.Interface{failingLists(1 << 30), fake.NewClientset()}}
	note := r.quiet(context.Background(), time.Second)
	if !strings.Contains(note, "not quiet") || !strings.Contains(note, "m1 pods") {
		t.Fatalf("note %q: want the give-up naming m1", note)
	}
}

// notReadyFor is a clientset of an apiserver (over HTTP) whose LISTs
// answer at once but whose /readyz fails n times first, as one whose etcd
// check still times out after a cut while the reads it serves pass.
func notReadyFor(t *testing.T, n int64) kubernetes.Interface {
	var fails atomic.Int64
	fails.Store(n)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/readyz":
			if fails.Add(-1) >= 0 {
				http.Error(w, "[-]etcd failed: reason withheld", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "ok")
		case strings.HasSuffix(r.URL.Path, "/pods"):
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[]}`)
		case strings.HasSuffix(r.URL.Path, "/nodes"):
			fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","items":[]}`)
		case strings.HasSuffix(r.URL.Path, "/leases"):
			fmt.Fprint(w, `{"kind":"LeaseList","apiVersion":"coordination.k8s.io/v1","items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The reads can pass while the apiserver itself says it is not ready: the
// gate waits for /readyz too.
func TestQuietGateWaitsForReadyz(t *testing.T) {
	r := &Runner{Clients: []kubernetes.Interface{notReadyFor(t, 0), notReadyFor(t, 4)}}
	note := r.quiet(context.Background(), time.Minute)
	if !strings.Contains(note, "waited") || !strings.Contains(note, "m2 readyz") {
		t.Fatalf("note %q: want the wait and the apiserver that was not ready (m2 readyz)", note)
	}
	if note := (&Runner{Clients: []kubernetes.Interface{notReadyFor(t, 0)}}).quiet(context.Background(), time.Minute); note != "" {
		t.Fatalf("a ready apiserver got the note %q", note)
	}
}
