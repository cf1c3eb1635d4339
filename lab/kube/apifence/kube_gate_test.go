//go:build kube

package apifence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
)

// termBox is a settable term for the gate.
type termBox struct{ v atomic.Pointer[gate.Term] }

func (b *termBox) set(t gate.Term) { b.v.Store(&t) }
func (b *termBox) get() gate.Term  { return *b.v.Load() }

type gated struct {
	g     *gate.Gate
	local *localca.CA
	term  *termBox
}

// startGate serves a gate for kube-scheduler.service holding token, to the
// upstreams in order (the first that answers).
func startGate(t *testing.T, p *plane, token int64, upstreams ...*rest.Config) *gated {
	t.Helper()
	local, err := localca.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	serving, err := local.Serving("kube-scheduler.service")
	if err != nil {
		t.Fatal(err)
	}
	tb := &termBox{}
	tb.set(gate.Term{Open: true, Token: token})
	g, err := gate.Listen(gate.Config{Unit: "kube-scheduler.service", Serving: serving, ClientCAs: p.ca.Pool(), Upstreams: upstreams, Term: tb.get})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve() }()
	t.Cleanup(func() { _ = g.Close() })
	return &gated{g: g, local: local, term: tb}
}

// throughGate is the component's own credential, pointed at the gate (what
// install-kubeconfig makes of its kubeconfig).
func (gd *gated) throughGate(direct *rest.Config) *rest.Config {
	c := rest.CopyConfig(direct)
	c.Host = gd.g.URL()
	c.TLSClientConfig.CAFile = ""
	c.TLSClientConfig.CAData = gd.local.PEM()
	return c
}

func testGate(t *testing.T, p *plane, sup *rest.Config) {
	gd := startGate(t, p, 101, sup)
	sched := gd.throughGate(p.config(t, 0, "system:kube-scheduler"))
	if err := writeEvent(t, sched, "via-gate"); err != nil {
		t.Fatalf("scheduler through the gate with the current term: %v", err)
	}
	// A resumed old leader: its gate still believes in token 100.
	gd.term.set(gate.Term{Open: true, Token: 100})
	wantDenied(t, "through a gate holding the previous term", writeEvent(t, sched, "stale-gate"))
	// Standby: refused by the gate itself, nothing reaches the apiserver.
	gd.term.set(gate.Term{Reason: "standby"})
	if err := writeEvent(t, sched, "standby"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("through a closed gate: %v, want 503 from the gate", err)
	}
	gd.term.set(gate.Term{Open: true, Token: 101})
	// A component certificate with an O field (kubernetes-the-hard-way's):
	// the gate impersonates that group too, which the ClusterRole must
	// allow (issue 23 item 5(c): 403 on every request before).
	withO := gd.throughGate(p.config(t, 0, "system:kube-scheduler", "system:kube-scheduler"))
	if err := writeEvent(t, withO, "via-gate-with-o"); err != nil {
		t.Errorf("scheduler certificate with O=system:kube-scheduler through the gate: %v", err)
	}

	// A controller's service-account token: authenticated by TokenReview.
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	for _, sa := range []struct{ ns, name string }{{"kube-system", "replicaset-controller"}} {
		if _, err := admin.CoreV1().ServiceAccounts(sa.ns).Create(t.Context(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	tr, err := admin.CoreV1().ServiceAccounts("kube-system").CreateToken(t.Context(), "replicaset-controller", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saDirect := &rest.Config{Host: p.urls[0], QPS: -1, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAFile: p.ca.CertFile}}
	saGate := gd.throughGate(saDirect)
	// Let it write events in default (the test cluster runs no
	// controller-manager, so no bootstrap roles bind it).
	if _, err := admin.RbacV1().Roles("default").Create(t.Context(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "events-writer"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "events-writer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "events-writer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "replicaset-controller", Namespace: "kube-system"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// RBAC caches: give the binding a moment to apply, directly.
	deadline := time.Now().Add(30 * time.Second)
	for err := writeEvent(t, saGate, "sa-via-gate"); err != nil; err = writeEvent(t, saGate, "sa-via-gate") {
		if time.Now().After(deadline) {
			t.Fatalf("service account through the gate (TokenReview, impersonation): %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantDenied(t, "the service account's own token, directly", writeEvent(t, saDirect, "sa-direct"))

	// Cut ends a watch at once.
	w, err := clientset(t, sched).CoreV1().Pods("").Watch(context.WithoutCancel(t.Context()), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n := gd.g.Cut()
	select {
	case _, ok := <-w.ResultChan():
		for ok {
			_, ok = <-w.ResultChan()
		}
		t.Logf("Cut closed %d connection(s); the watch ended %s later", n, time.Since(start).Round(time.Microsecond))
	case <-time.After(20 * time.Second):
		t.Error("watch still open 20 s after Cut")
	}
	w.Stop()
}

// procLoad is the load averages, for the log: the p99s follow the load.
func procLoad() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// testPerformance: added latency of the gate on loopback (p50, p99) and the
// throughput of a large LIST, gate against direct, same client, same data.
func testPerformance(t *testing.T, p *plane, sup *rest.Config) {
	gd := startGate(t, p, 101, sup)
	direct := p.config(t, 0, "system:kube-scheduler")
	viaGate := gd.throughGate(direct)

	// Direct and gated requests alternate, so that the shared machine's
	// load falls on both alike; three rounds of 1000 pairs show the spread.
	getter := func(c *rest.Config) func() time.Duration {
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			t.Fatal(err)
		}
		url := c.Host + "/api/v1/namespaces/default/pods?limit=1"
		return func() time.Duration {
			s := time.Now()
			resp, err := hc.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", url, resp.Status)
			}
			return time.Since(s)
		}
	}
	getDirect, getGate := getter(direct), getter(viaGate)
	for range 50 {
		getDirect() // warm: connections, caches
		getGate()
	}
	pct := func(d []time.Duration, p int) time.Duration { slices.Sort(d); return d[len(d)*p/100] }
	const rounds = 5
	var added50, added99 []time.Duration
	for round := 1; round <= rounds; round++ {
		var ds, gs []time.Duration
		for range 1000 {
			ds = append(ds, getDirect())
			gs = append(gs, getGate())
		}
		d50, d99, g50, g99 := pct(ds, 50), pct(ds, 99), pct(gs, 50), pct(gs, 99)
		t.Logf("latency round %d, GET pods?limit=1, 1000 alternating pairs: direct p50 %s p99 %s; via gate p50 %s p99 %s; added p50 %s p99 %s",
			round, d50, d99, g50, g99, g50-d50, g99-d99)
		added50, added99 = append(added50, g50-d50), append(added99, g99-d99)
	}
	slices.Sort(added50)
	slices.Sort(added99)
	t.Logf("latency over %d rounds, added by the gate: p50 median %s (min %s, max %s); p99 median %s (min %s, max %s); /proc/loadavg %s",
		rounds, added50[rounds/2], added50[0], added50[rounds-1], added99[rounds/2], added99[0], added99[rounds-1], procLoad())

	// A large LIST: 300 pods with 100 kB annotations each (~30 MB of JSON).
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	big := strings.Repeat("x", 100<<10)
	for i := range 300 {
		_, err := admin.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%03d", i), Annotations: map[string]string{"pad": big}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	list := func(c *rest.Config) (mbps float64, n int64) {
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			t.Fatal(err)
		}
		s := time.Now()
		resp, err := hc.Get(c.Host + "/api/v1/namespaces/default/pods")
		if err != nil {
			t.Fatal(err)
		}
		n, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("LIST: %s %v", resp.Status, err)
		}
		return float64(n) / 1e6 / time.Since(s).Seconds(), n
	}
	var ds, gs []float64
	var size int64
	for range 5 {
		v, n := list(direct)
		ds = append(ds, v)
		v, _ = list(viaGate)
		gs = append(gs, v)
		size = n
	}
	slices.Sort(ds)
	slices.Sort(gs)
	t.Logf("LIST of %.1f MB, 5 runs each: direct median %.0f MB/s (min %.0f, max %.0f); via gate median %.0f MB/s (min %.0f, max %.0f)",
		float64(size)/1e6, ds[2], ds[0], ds[4], gs[2], gs[0], gs[4])
	_ = apifence.PolicyName
}
