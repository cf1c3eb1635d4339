//go:build kube

package commits

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
)

// TestRecordRealCommits runs two real kube-apiservers ("m1" and "m2") on one
// embedded etcd, each through a proxy that can hold one direction of its
// etcd connections, and records three handoffs of the scheduler's and the
// ReplicaSet controller's writes from m1's term to m2's, as etcd committed
// them (the Recorder) and as the apiservers audited them:
//
//   - clean: m1 writes with token 1, then m2 with token 2 (as the gate
//     sends them: impersonated, with the token as a user extra);
//   - late: m1's create and binding are held on their way to etcd (the
//     frames of a partitioned connection), m2 writes, then m1's are let
//     through and commit after m2's first write, answered 201;
//   - ghost: m1's create reaches etcd but its answer is held until the
//     apiserver's 1 s request timeout (504), then m2 writes.
//
// The judge must find exactly that in each. With KHA_RECORD_COMMITS=1 the
// recordings are written to testdata/ for the unit tests.
func TestRecordRealCommits(t *testing.T) {
	bins, err := build.Lookup("", build.DefaultVersion)
	if err != nil {
		t.Fatal(err) // the tag says the caller wants the real binaries: fail, do not skip
	}
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.NewCluster(t, etcdtest.Options{TLS: ca, Timing: etcdtest.Stock})
	cli := etcd.Client(t)
	target := strings.TrimPrefix(etcd.Endpoints()[0], "https://")
	const prefix = "/commits-test"
	var proxies []*valveProxy
	var clients []*rest.Config
	audits := map[string]string{}
	for i, m := range []string{"m1", "m2"} {
		p := newValveProxy(t, target)
		proxies = append(proxies, p)
		s := kube.APIServer{
			Binary: bins.Path("kube-apiserver"), Dir: filepath.Join(dir, "apiserver-"+m), CA: ca,
			Etcd: kube.Etcd{Endpoints: []string{"https://" + p.Addr()}, CAFile: ca.CertFile,
				CertFile: etcd.ClientCert().CertFile, KeyFile: etcd.ClientCert().KeyFile, Prefix: prefix},
			Address: "127.0.0.1", Port: freePort(t),
		}
		if i > 0 {
			copyKeys(t, filepath.Join(dir, "apiserver-m1"), s.Dir)
		}
		f, err := s.Start(context.WithoutCancel(t.Context()))
		t.Cleanup(func() { _ = s.Stop(context.Background(), 10*time.Second) })
		if err != nil {
			t.Fatal(err)
		}
		audits[m] = f.AuditLog
		clients = append(clients, &rest.Config{Host: s.URL(), QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: ca.CertFile}})
	}
	w := &writers{t: t, ca: ca, servers: clients, pairs: map[string]pki.Pair{}}
	rsUID := w.setup()

	record := func(name string, phase func()) Case {
		rec, err := Start(t.Context(), cli, prefix)
		if err != nil {
			t.Fatal(err)
		}
		from := time.Now()
		phase()
		time.Sleep(300 * time.Millisecond) // the audit log's last lines
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r, err := rec.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := Case{Recording: r, Audit: map[string][]string{}}
		for m, path := range audits {
			c.Audit[m] = auditLines(t, path, from.Add(-time.Second), time.Now())
		}
		if os.Getenv("KHA_RECORD_COMMITS") == "1" {
			writeCase(t, filepath.Join("testdata", name+".json.gz"), c)
		}
		return c
	}

	clean := record("clean", func() {
		w.adminPod() // the prober's writes: not the managed components'
		w.bind(0, "1", "p-0")
		w.createOwned(0, "1", rsUID, "")
		w.event(0, "1", "p-0", "")
		time.Sleep(1100 * time.Millisecond) // the next term's creates in another second
		w.bind(1, "2", "p-1")
		w.createOwned(1, "2", rsUID, "")
		w.event(1, "2", "p-1", "")
	})
	late := record("late", func() {
		w.bind(0, "", "p-2")
		w.createOwned(0, "", rsUID, "")
		proxies[0].hold(true, false) // m1's requests to etcd held, as by a partition
		var wg sync.WaitGroup
		wg.Go(func() { w.createOwned(0, "", rsUID, "") })
		wg.Go(func() { w.bind(0, "", "p-3") })
		time.Sleep(1100 * time.Millisecond)
		w.bind(1, "", "p-4")
		w.createOwned(1, "", rsUID, "")
		proxies[0].hold(false, false) // the partition heals: the held frames reach etcd
		wg.Wait()
		w.bind(1, "", "p-5")
	})
	ghost := record("ghost", func() {
		w.bind(0, "", "p-6")
		proxies[0].hold(false, true) // m1's answers from etcd held
		w.createOwned(0, "", rsUID, "1s")
		proxies[0].hold(false, false)
		time.Sleep(1100 * time.Millisecond)
		w.bind(1, "", "p-7")
		w.createOwned(1, "", rsUID, "")
	})
	for name, c := range map[string]Case{"clean": clean, "late": late, "ghost": ghost} {
		rep := judge(t, c)
		t.Logf("%s: %s", name, rep)
		for _, l := range rep.Late {
			t.Logf("%s: late: %s", name, l)
		}
		for _, g := range rep.Ghosts {
			t.Logf("%s: ghost: %s", name, g)
		}
	}
	checkClean(t, judge(t, clean))
	checkLate(t, judge(t, late))
	checkGhost(t, judge(t, ghost))
}

// writers send the managed components' writes to apiserver i, as the
// component's own credential (token "") or as the gate does (the admin
// impersonating the component with the token as a user extra).
type writers struct {
	t       *testing.T
	ca      *pki.CA
	servers []*rest.Config
	mu      sync.Mutex
	pairs   map[string]pki.Pair
}

func (w *writers) client(i int, user, token, timeout string) kubernetes.Interface {
	w.t.Helper()
	cred := user
	if token != "" {
		cred = "admin"
	}
	w.mu.Lock()
	pair, ok := w.pairs[cred]
	if !ok {
		var groups []string
		if cred == "admin" {
			groups = []string{"system:masters"}
		}
		var err error
		if pair, err = w.ca.KubeClient(cred, groups...); err != nil {
			w.t.Fatal(err)
		}
		w.pairs[cred] = pair
	}
	w.mu.Unlock()
	c := rest.CopyConfig(w.servers[i])
	c.CertFile, c.KeyFile = pair.CertFile, pair.KeyFile
	if token != "" {
		c.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: map[string][]string{gate.TokenExtra: {token}}}
	}
	if timeout != "" {
		// The apiserver's own deadline (?timeout=), not the client's.
		c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return timeoutParam{rt, timeout} }
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		w.t.Fatal(err)
	}
	return cs
}

// setup creates the namespace, the ReplicaSet the pods name as owner
// (0 replicas: no controller-manager runs) and the pods to bind, as the
// admin.
func (w *writers) setup() string {
	ctx := w.t.Context()
	admin := w.client(0, "admin", "", "")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	zero := int32(0)
	labels := map[string]string{"app": "probe"}
	rs, err := admin.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "rs"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &zero, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range 8 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i)}, Spec: podSpec()}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			w.t.Fatal(err)
		}
	}
	return string(rs.UID)
}

// adminPod creates and deletes a pod as the admin, as the prober does.
func (w *writers) adminPod() {
	ctx := w.t.Context()
	admin := w.client(0, "admin", "", "")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "admin-0"}, Spec: podSpec()}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		w.t.Fatal(err)
	}
	zero := int64(0)
	if err := admin.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writers) bind(i int, token, pod string) {
	w.t.Helper()
	err := w.client(i, schedUser, token, "").CoreV1().Pods(ns).Bind(w.t.Context(),
		&corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod}, Target: corev1.ObjectReference{Kind: "Node", Name: fmt.Sprintf("w%d", i+1)}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Errorf("bind %s at apiserver %d: %v", pod, i, err)
	}
}

// createOwned creates a pod of the ReplicaSet as its controller does
// (generateName, a controller ownerReference); with timeout, the answer
// may be a 504 (the ghost), which is not an error here.
func (w *writers) createOwned(i int, token, rsUID, timeout string) {
	w.t.Helper()
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "rs-", Labels: map[string]string{"app": "probe"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: types.UID(rsUID), Controller: &yes}}}, Spec: podSpec()}
	_, err := w.client(i, rscUser, token, timeout).CoreV1().Pods(ns).Create(w.t.Context(), p, metav1.CreateOptions{})
	if err != nil && timeout == "" {
		w.t.Errorf("create at apiserver %d: %v", i, err)
	}
	if timeout != "" {
		w.t.Logf("create at apiserver %d with ?timeout=%s: %v", i, timeout, err)
	}
}

func (w *writers) event(i int, token, pod, timeout string) {
	w.t.Helper()
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%d", pod, time.Now().UnixNano())},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1"},
		Reason:         "Scheduled", Message: "bound", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "default-scheduler"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1}
	if _, err := w.client(i, schedUser, token, timeout).CoreV1().Events(ns).Create(w.t.Context(), ev, metav1.CreateOptions{}); err != nil {
		w.t.Errorf("event at apiserver %d: %v", i, err)
	}
}

type timeoutParam struct {
	rt      http.RoundTripper
	timeout string
}

func (p timeoutParam) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	q := r.URL.Query()
	q.Set("timeout", p.timeout)
	r.URL.RawQuery = q.Encode()
	return p.rt.RoundTrip(r)
}

// auditLines are the ResponseComplete lines of one audit log completed in
// [from, to], of the test's namespace or a managed user (the rest is the
// apiservers' own traffic, left out to keep the recording small).
func auditLines(t *testing.T, path string, from, to time.Time) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev struct {
			Stage     string    `json:"stage"`
			At        time.Time `json:"stageTimestamp"`
			ObjectRef *struct {
				Namespace string `json:"namespace"`
			} `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Stage != "ResponseComplete" || ev.At.Before(from) || ev.At.After(to) || ev.ObjectRef == nil || ev.ObjectRef.Namespace != ns {
			continue
		}
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// copyKeys shares the service-account key pair between the apiservers.
func copyKeys(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sa.key", "sa.pub"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
