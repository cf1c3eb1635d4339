//go:build kube

package kube

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// binaries are the cached release (kha-lab kube-build); the test fails, it
// does not skip, when they are missing: the tag says the caller wants them.
func binaries(t *testing.T) build.Binaries {
	t.Helper()
	b, err := build.Lookup(os.Getenv("KHA_LAB_K8S_CACHE"), build.DefaultVersion)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestAPIServerServesAConfigMapAndAuditsIt starts one real kube-apiserver on
// loopback against a real (embedded, TLS) etcd, creates a ConfigMap with
// client-go as the admin, finds the write in the audit log, checks that an
// unauthenticated client is refused, and stops the apiserver by PID.
//
//	go test -tags kube -timeout 20m -run TestAPIServer ./lab/kube
func TestAPIServerServesAConfigMapAndAuditsIt(t *testing.T) {
	bins := binaries(t)
	a, f, ca := startAPIServer(t, bins)
	id, ok := a.Running()
	if !ok {
		t.Fatal("no process recorded after Start")
	}
	start := time.Now()
	cs := adminClient(t, a, f)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kha-lab-probe"}, Data: map[string]string{"written": start.UTC().Format(time.RFC3339)}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}
	got, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kha-lab-probe", metav1.GetOptions{})
	if err != nil || got.Data["written"] != cm.Data["written"] {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists (409)", err)
	}

	assertRefused(t, a, ca)
	assertAudited(t, f.AuditLog)

	stop := time.Now()
	if err := a.Stop(t.Context(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver stopped (SIGTERM) in %s", time.Since(stop).Round(time.Millisecond))
	if proc.Alive(id) {
		t.Errorf("PID %d still alive after Stop", id.PID)
	}
}

// startAPIServer runs a kube-apiserver against a fresh one-member TLS etcd,
// stopped when the test ends.
func startAPIServer(t *testing.T, bins build.Binaries) (APIServer, Files, *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA(filepath.Join(t.TempDir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.NewCluster(t, etcdtest.Options{TLS: ca})
	a := APIServer{
		Binary: bins.Path("kube-apiserver"), Dir: filepath.Join(t.TempDir(), "apiserver"), CA: ca,
		Etcd: Etcd{Endpoints: etcd.Endpoints(), CAFile: ca.CertFile,
			CertFile: etcd.ClientCert().CertFile, KeyFile: etcd.ClientCert().KeyFile, Prefix: "/kube-test"},
		Address: "127.0.0.1", Port: freePort(t),
	}
	start := time.Now()
	f, err := a.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver ready after %s on %s", time.Since(start).Round(time.Millisecond), a.URL())
	t.Cleanup(func() {
		if err := a.Stop(context.Background(), 30*time.Second); err != nil {
			t.Error(err)
		}
	})
	return a, f, ca
}

func adminClient(t *testing.T, a APIServer, f Files) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: a.URL(), TLSClientConfig: rest.TLSClientConfig{
		CAFile: a.CA.CertFile, CertFile: f.Admin.CertFile, KeyFile: f.Admin.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// assertRefused: RBAC gives neither an anonymous client (no certificate)
// nor an authenticated user without bindings any write: both get 403.
// (401 would mean authentication, not RBAC, refused.)
func assertRefused(t *testing.T, a APIServer, ca *pki.CA) {
	t.Helper()
	nobody, err := ca.KubeClient("nobody")
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := a.Client(nobody)
	if err != nil {
		t.Fatal(err)
	}
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	for who, c := range map[string]*http.Client{"system:anonymous": anon, "nobody": withCert} {
		body := strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"refused"}}`)
		resp, err := c.Post(a.URL()+"/api/v1/namespaces/default/configmaps", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("create as %s answered %s, want 403 Forbidden from RBAC", who, resp.Status)
		}
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event the lab reads.
type auditEvent struct {
	Verb      string                    `json:"verb"`
	User      struct{ Username string } `json:"user"`
	ObjectRef *struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	ResponseStatus *struct{ Code int } `json:"responseStatus"`
	Stage          string              `json:"stage"`
}

// assertAudited finds the admin's create of the ConfigMap, answered 201,
// and the refused second create, answered 409, in the JSON audit log.
func assertAudited(t *testing.T, path string) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	codes := map[int]bool{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		n++
		if e.Verb == "create" && e.User.Username == "admin" && e.ObjectRef != nil && e.ObjectRef.Resource == "configmaps" &&
			e.ObjectRef.Name == "kha-lab-probe" && e.Stage == "ResponseComplete" && e.ResponseStatus != nil {
			codes[e.ResponseStatus.Code] = true
		}
		if e.Verb == "get" || e.Verb == "list" || e.Verb == "watch" {
			t.Errorf("audit log holds a %s: the policy should drop reads", e.Verb)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if !codes[201] || !codes[409] {
		t.Errorf("audit log (%d events) has admin's ConfigMap creates with codes %v, want 201 and 409", n, codes)
	}
}
