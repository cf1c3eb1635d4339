package plane

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
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
