package commits

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
)

// TestRecordEtcdCommits records the three handoffs of TestRecordRealCommits
// (clean, late, ghost) on a real etcd (embedded), through the same kind of
// held connections, with two stand-ins for the apiservers that write as
// the apiserver's etcd3 store does (a create is a Txn on create revision
// 0, a binding a Get then a Txn on the mod revision: k8s.io/apiserver
// pkg/storage/etcd3/store.go), objects encoded by apimachinery's protobuf
// serializer behind the "k8s\x00" magic, and an audit line per request
// from its outcome (201, or 504 at the request's deadline). What etcd
// commits, and in which order, is etcd's own. With KHA_RECORD_COMMITS=1 it
// writes testdata/ (TestRecordRealCommits, -tags kube, records the same
// cases from real kube-apiservers).
func TestRecordEtcdCommits(t *testing.T) {
	cases := recordStandIn(t)
	for _, name := range []string{"clean", "late", "ghost"} {
		logReport(t, name, judge(t, cases[name]))
	}
	checkClean(t, judge(t, cases["clean"]))
	checkLate(t, judge(t, cases["late"]))
	checkGhost(t, judge(t, cases["ghost"]))
	for name, c := range cases {
		checkPrevRevs(t, name, c.Recording)
	}
	if os.Getenv("KHA_RECORD_COMMITS") == "1" {
		for name, c := range cases {
			writeCase(t, filepath.Join("testdata", name+".json.gz"), c)
		}
	}
}

const standInPrefix = "/commits-test"

func recordStandIn(t *testing.T) map[string]Case {
	etcd := etcdtest.NewCluster(t, etcdtest.Options{Timing: etcdtest.Stock})
	cli := etcd.Client(t)
	target := strings.TrimPrefix(etcd.Endpoints()[0], "http://")
	var servers []*standIn
	for _, m := range []string{"m1", "m2"} {
		p := newValveProxy(t, target)
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		servers = append(servers, &standIn{t: t, name: m, kv: c, proxy: p})
	}
	m1, m2 := servers[0], servers[1]
	m1.setup()
	out := map[string]Case{}
	record := func(name string, phase func()) {
		rec, err := Start(t.Context(), cli, standInPrefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range servers {
			s.audit = nil
		}
		phase()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r, err := rec.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = Case{Recording: r, Audit: map[string][]string{"m1": m1.audit, "m2": m2.audit}}
	}
	record("clean", func() {
		m1.admin() // the prober's writes: not the managed components'
		m1.bind("1", "p-0")
		m1.createOwned("1", 0)
		m1.event("1", "p-0")
		time.Sleep(1100 * time.Millisecond) // the next term's creates in another second
		m2.bind("2", "p-1")
		m2.createOwned("2", 0)
		m2.event("2", "p-1")
	})
	record("late", func() {
		m1.bind("", "p-2")
		m1.createOwned("", 0)
		m1.proxy.hold(true, false) // m1's requests to etcd held, as by a partition
		var wg sync.WaitGroup
		wg.Go(func() { m1.createOwned("", 0) })
		wg.Go(func() { m1.bind("", "p-3") })
		time.Sleep(1100 * time.Millisecond)
		m2.bind("", "p-4")
		m2.createOwned("", 0)
		m1.proxy.hold(false, false) // the partition heals: the held frames reach etcd
		wg.Wait()
		m2.bind("", "p-5")
	})
	record("ghost", func() {
		m1.bind("", "p-6")
		m1.proxy.hold(false, true) // m1's answers from etcd held
		m1.createOwned("", time.Second)
		m1.proxy.hold(false, false)
		time.Sleep(1100 * time.Millisecond)
		m2.bind("", "p-7")
		m2.createOwned("", 0)
	})
	return out
}

// standIn writes to etcd as one master's kube-apiserver would for the
// managed components' requests, and audits each request.
type standIn struct {
	t     *testing.T
	name  string
	kv    *clientv3.Client
	proxy *valveProxy
	mu    sync.Mutex
	audit []string
	seq   int
}

var storage = func() runtime.Encoder {
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	return codecs.EncoderForVersion(pb, corev1.SchemeGroupVersion)
}()

const rsUID = "5f0c6d9e-0000-4000-8000-00000000a001"

func key(resource, name string) string { return standInPrefix + "/" + resource + "/" + ns + "/" + name }

func (s *standIn) encode(obj runtime.Object) []byte {
	b, err := runtime.Encode(storage, obj)
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

// setup creates the pods to bind, as the admin (not audited: not managed).
func (s *standIn) setup() {
	for i := range 8 {
		p := &corev1.Pod{ObjectMeta: s.meta(fmt.Sprintf("p-%d", i), "kubectl"), Spec: podSpec()}
		if _, err := s.kv.Put(s.t.Context(), key("pods", p.Name), string(s.encode(p))); err != nil {
			s.t.Fatal(err)
		}
	}
}

// admin creates and deletes a pod of its own, as the prober does (not
// audited here: the judge must leave it out by the object alone).
func (s *standIn) admin() {
	p := &corev1.Pod{ObjectMeta: s.meta("admin-0", "kha-lab"), Spec: podSpec()}
	if _, err := s.kv.Put(s.t.Context(), key("pods", p.Name), string(s.encode(p))); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.kv.Delete(s.t.Context(), key("pods", p.Name)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *standIn) meta(name, manager string) metav1.ObjectMeta {
	now := metav1.Now()
	s.mu.Lock()
	s.seq++
	uid := types.UID(fmt.Sprintf("5f0c6d9e-0000-4000-8000-%s%010d", s.name, s.seq))
	s.mu.Unlock()
	return metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid, CreationTimestamp: now,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now}}}
}

func podSpec() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}
}

// createOwned creates a ReplicaSet pod as its controller (generateName:
// the audit entry names no object); timeout is the request's deadline (0:
// none), past which the answer is 504 whatever etcd did.
func (s *standIn) createOwned(token string, timeout time.Duration) {
	received := time.Now()
	yes := true
	name := fmt.Sprintf("rs-%s%d", s.name, received.UnixNano()%100000)
	m := s.meta(name, "kube-controller-manager")
	m.GenerateName = "rs-"
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: rsUID, Controller: &yes}}
	ctx := s.t.Context()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	k := key("pods", name)
	_, err := s.kv.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, string(s.encode(&corev1.Pod{ObjectMeta: m, Spec: podSpec()})))).Commit()
	s.log(rscUser, token, "create", "pods", "", "", received, err)
}

// bind binds pod as the scheduler: a read, then an update on its revision.
func (s *standIn) bind(token, pod string) {
	received := time.Now()
	ctx := s.t.Context()
	k := key("pods", pod)
	err := func() error {
		resp, err := s.kv.Get(ctx, k)
		if err != nil || len(resp.Kvs) != 1 {
			return errors.Join(err, fmt.Errorf("pod %s: %d keys", pod, len(resp.Kvs)))
		}
		obj, err := decode(resp.Kvs[0].Value)
		if err != nil {
			return err
		}
		p := obj.(*corev1.Pod)
		p.Spec.NodeName = "w-" + s.name
		now := metav1.Now()
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, Subresource: "binding"})
		_, err = s.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", resp.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(k, string(s.encode(p)))).Commit()
		return err
	}()
	s.log(schedUser, token, "create", "pods", "binding", pod, received, err)
}

// event creates the scheduler's event for pod.
func (s *standIn) event(token, pod string) {
	received := time.Now()
	name := fmt.Sprintf("%s.%d", pod, received.UnixNano())
	ev := &corev1.Event{ObjectMeta: s.meta(name, "kube-scheduler"),
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1"},
		Reason:         "Scheduled", Message: "bound", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "default-scheduler"}}
	k := key("events", name)
	_, err := s.kv.Txn(s.t.Context()).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).Then(clientv3.OpPut(k, string(s.encode(ev)))).Commit()
	s.log(schedUser, token, "create", "events", "", name, received, err)
}

// log appends the request's audit line (ResponseComplete, Metadata level,
// as kube-apiserver v1.37 writes it): as the component's own credential,
// or with token as the gate sends it (impersonated, the token an extra).
func (s *standIn) log(user, token, verb, resource, sub, name string, received time.Time, err error) {
	code, msg := 201, ""
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(fmt.Sprint(err), "deadline"):
		code, msg = 504, "context deadline exceeded"
	case err != nil:
		s.t.Errorf("%s: %s %s %s: %v", s.name, verb, resource, name, err)
		code, msg = 500, err.Error()
	}
	who := fmt.Sprintf(`"user":{"username":%q,"groups":["system:authenticated"]}`, user)
	if token != "" {
		who = fmt.Sprintf(`"user":{"username":"kha-supervisor","groups":["system:authenticated"]},"impersonatedUser":{"username":%q,"extra":{%q:[%q]}}`, user, gate.TokenExtra, token)
	}
	objRef := fmt.Sprintf(`{"resource":%q,"namespace":%q,"name":%q,"apiVersion":"v1"}`, resource, ns, name)
	if sub != "" {
		objRef = fmt.Sprintf(`{"resource":%q,"subresource":%q,"namespace":%q,"name":%q,"apiVersion":"v1"}`, resource, sub, ns, name)
	}
	line := fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/%s/%s","verb":%q,%s,"sourceIPs":["127.0.0.1"],"objectRef":%s,"responseStatus":{"metadata":{},"message":%q,"code":%d},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`,
		ns, resource, verb, who, objRef, msg, code, received.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
	s.mu.Lock()
	s.audit = append(s.audit, line)
	s.mu.Unlock()
}

func logReport(t *testing.T, name string, rep Report) {
	t.Helper()
	t.Logf("%s: %s", name, rep)
	for _, c := range rep.Commits {
		t.Logf("%s: commit %s", name, c)
	}
	for _, l := range rep.Late {
		t.Logf("%s: late %s", name, l)
	}
	for _, p := range rep.Problems {
		t.Logf("%s: problem %s", name, p)
	}
}

// checkPrevRevs: a write of an existing key names the revision of the
// key's previous write (the judge's floor for the key's first write in a
// recording), the revision of that write when the recording has it.
func checkPrevRevs(t *testing.T, name string, r Recording) {
	t.Helper()
	last := map[string]int64{}
	updates := 0
	for _, w := range r.Writes {
		switch prev, ok := last[w.Key]; {
		case w.Prev == nil && w.PrevRev != 0:
			t.Errorf("%s: rev %d %s: a create names a previous write (rev %d)", name, w.Rev, w.Key, w.PrevRev)
		case w.Prev != nil && (w.PrevRev == 0 || w.PrevRev >= w.Rev):
			t.Errorf("%s: rev %d %s: previous write's revision %d", name, w.Rev, w.Key, w.PrevRev)
		case w.Prev != nil && ok && w.PrevRev != prev:
			t.Errorf("%s: rev %d %s: previous write's revision %d, the recording's is %d", name, w.Rev, w.Key, w.PrevRev, prev)
		case w.Prev != nil:
			updates++
		}
		last[w.Key] = w.Rev
	}
	if updates == 0 {
		t.Errorf("%s: no write of an existing key: nothing checked", name)
	}
}
