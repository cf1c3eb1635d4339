//go:build kube

package apifence_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	flowv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
)

// plane is two real kube-apiservers (lab/kube, the cached v1.37.2 binaries)
// on one real etcd, as on two masters.
type plane struct {
	ca      *pki.CA
	urls    []string
	admin   pki.Pair
	audit   []string // each apiserver's audit log
	saKey   string   // apiserver 0's service-account signing key
	servers []*kube.APIServer

	mu    sync.Mutex
	pairs map[string]pki.Pair
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

func startPlane(t *testing.T) *plane {
	t.Helper()
	return startPlaneAt(t, false, "127.0.0.1", "127.0.0.1")
}

// startPlaneAt starts one apiserver per address, which it binds. Loopback
// addresses turn the endpoint reconciler off (lab/kube/args.go), so the
// cluster knows its apiservers by their identity leases alone, one per host
// name: with hostnames each runs under its own, its address (a name that
// resolves to itself).
func startPlaneAt(t *testing.T, hostnames bool, addrs ...string) *plane {
	t.Helper()
	bins, err := build.Lookup("", build.DefaultVersion)
	if err != nil {
		t.Fatal(err) // the tag says the caller wants the real binaries: fail, do not skip
	}
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.NewCluster(t, etcdtest.Options{TLS: ca})
	p := &plane{ca: ca, pairs: map[string]pki.Pair{}}
	// One after the other: both issue their certificates into the one CA
	// directory, and Start re-issues them.
	var files kube.Files
	for i, addr := range addrs {
		s := kube.APIServer{
			Binary: bins.Path("kube-apiserver"), Dir: filepath.Join(dir, fmt.Sprintf("apiserver-%d", i)), CA: ca,
			Etcd: kube.Etcd{Endpoints: etcd.Endpoints(), CAFile: ca.CertFile,
				CertFile: etcd.ClientCert().CertFile, KeyFile: etcd.ClientCert().KeyFile, Prefix: "/apifence-test"},
			Address: addr, Port: freePort(t),
		}
		if hostnames {
			s.Hostname = addr
		}
		start := time.Now()
		f, err := s.Start(context.WithoutCancel(t.Context()))
		t.Cleanup(func() { _ = s.Stop(context.Background(), 10*time.Second) })
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kube-apiserver %d ready on %s after %s", i, s.URL(), time.Since(start).Round(time.Millisecond))
		if i == 0 {
			files = f
			p.saKey = f.ServiceAccount
		}
		p.urls = append(p.urls, s.URL())
		p.servers = append(p.servers, &s)
		p.audit = append(p.audit, f.AuditLog)
	}
	p.admin = files.Admin
	return p
}

// config is a client-go config on apiserver i presenting user's certificate.
func (p *plane) config(t *testing.T, i int, user string, groups ...string) *rest.Config {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Issued once per user: client-go reloads a certificate file that
	// changes and closes every connection that used it.
	key := user + "/" + strings.Join(groups, ",")
	pair, ok := p.pairs[key]
	if !ok {
		var err error
		if pair, err = p.ca.KubeClient(user, groups...); err != nil {
			t.Fatal(err)
		}
		p.pairs[key] = pair
	}
	return &rest.Config{Host: p.urls[i], QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: p.ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile}}
}

func clientset(t *testing.T, c *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// install creates objects (the manifests' or the webhook variant's) as the
// admin.
func install(t *testing.T, cs kubernetes.Interface, objs []any) {
	t.Helper()
	ctx := t.Context()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *kubeapi.ConfigMap:
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: o.ObjectMeta, Data: o.Data}, metav1.CreateOptions{})
		case *admv1.ValidatingAdmissionPolicy:
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admv1.ValidatingAdmissionPolicyBinding:
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		case *flowv1.PriorityLevelConfiguration:
			_, err = cs.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, o, metav1.CreateOptions{})
		case *flowv1.FlowSchema:
			_, err = cs.FlowcontrolV1().FlowSchemas().Create(ctx, o, metav1.CreateOptions{})
		case *admv1.ValidatingWebhookConfiguration:
			_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, o, metav1.CreateOptions{})
		default:
			err = fmt.Errorf("unknown object %T", o)
		}
		if err != nil {
			t.Fatalf("install %s: %v", kindName(o), err)
		}
	}
}

func kindName(o any) string {
	a, err := meta.Accessor(o)
	if err != nil {
		return fmt.Sprintf("%T", o)
	}
	return fmt.Sprintf("%T %s", o, a.GetName())
}

// event is a real (not dry-run) write the scheduler's RBAC allows.
func event(name string) *corev1.Event {
	now := metav1.NewTime(time.Now())
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: name + "-", Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p", APIVersion: "v1"},
		Reason:         "Test", Message: name, Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "test"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

func writeEventDry(t *testing.T, c *rest.Config, name string) error {
	t.Helper()
	_, err := clientset(t, c).CoreV1().Events("default").Create(t.Context(), event(name), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

func writeEvent(t *testing.T, c *rest.Config, name string) error {
	t.Helper()
	_, err := clientset(t, c).CoreV1().Events("default").Create(t.Context(), event(name), metav1.CreateOptions{})
	return err
}

// asScheduler impersonates the scheduler from the supervisor's credential,
// with token (none if token is "").
func asScheduler(sup *rest.Config, token string) *rest.Config {
	c := rest.CopyConfig(sup)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:kube-scheduler"}
	if token != "" {
		c.Impersonate.Extra = map[string][]string{gate.TokenExtra: {token}}
	}
	return c
}

func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !apifence.IsPolicyDenial(err) || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "does not carry the current fencing token") {
		t.Errorf("%s: %v, want 422 from ValidatingAdmissionPolicy %s with its message", what, err, apifence.PolicyName)
	}
}

// TestAPIFenceAgainstRealAPIServers: two real kube-apiservers on one etcd,
// the manifests installed, the token published and confirmed on both.
//
//	go test -tags kube -timeout 20m -run TestAPIFence ./lab/kube/apifence/
func TestAPIFenceAgainstRealAPIServers(t *testing.T) {
	p := startPlane(t)
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	install(t, admin, apifence.Build(apifence.ManifestOptions{}).Objects())
	sup := []*rest.Config{p.config(t, 0, apifence.DefaultSupervisorUser), p.config(t, 1, apifence.DefaultSupervisorUser)}
	pub := &apifence.Publisher{Endpoints: sup}

	// Before any leader published: nothing fenced is admitted, not even a
	// token of "0" (the parameter holds no token yet). Dry runs: until the
	// apiserver's informers have the new policy, writes pass, as for any
	// freshly installed policy, and the audit judgement below must not
	// count those.
	for i := range p.urls {
		deadline := time.Now().Add(time.Minute)
		for {
			err := writeEventDry(t, asScheduler(sup[i], "0"), "zero")
			if apifence.IsPolicyDenial(err) || time.Now().After(deadline) {
				wantDenied(t, fmt.Sprintf("apiserver %d: token 0 before the first publish", i), err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	got, err := pub.Publish(ctx, 100)
	if err != nil {
		t.Fatalf("publish 100: %v", err)
	}
	t.Logf("published token 100 (previous %d) and confirmed on both apiservers in %s", got.Previous, got.Took.Round(time.Millisecond))

	for i := range p.urls {
		at := fmt.Sprintf("apiserver %d", i)
		if err := writeEvent(t, asScheduler(sup[i], "100"), "current"); err != nil {
			t.Errorf("%s: impersonated write with the current token: %v, want admitted", at, err)
		}
		wantDenied(t, at+": stale token 99", writeEvent(t, asScheduler(sup[i], "99"), "stale"))
		wantDenied(t, at+": no token", writeEvent(t, asScheduler(sup[i], ""), "none"))
		wantDenied(t, at+": the scheduler's own certificate, directly", writeEvent(t, p.config(t, i, "system:kube-scheduler"), "direct"))
		// A controller's service account, impersonated without the token.
		sa := rest.CopyConfig(sup[i])
		sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:replicaset-controller"}
		if err := writeEvent(t, sa, "sa"); !apifence.IsPolicyDenial(err) && !apierrors.IsForbidden(err) {
			t.Errorf("%s: controller service account without token: %v, want refused", at, err)
		}
		if err := writeEvent(t, p.config(t, i, "admin", "system:masters"), "admin"); err != nil {
			t.Errorf("%s: the admin (not a managed user) was affected: %v", at, err)
		}
	}
	// The guard: nobody but the supervisors changes the parameter.
	cm, err := admin.CoreV1().ConfigMaps(apifence.Namespace).Get(t.Context(), apifence.ParamName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["token"] = "999999"
	if _, err := admin.CoreV1().ConfigMaps(apifence.Namespace).Update(t.Context(), cm, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), apifence.GuardName) {
		t.Errorf("the admin changed the token: %v, want refused by %s", err, apifence.GuardName)
	}

	// A new term: the old token is refused on the very first request, on
	// every apiserver (Publish confirmed it before returning).
	switchStart := time.Now()
	got, err = pub.Publish(ctx, 101)
	if err != nil {
		t.Fatalf("publish 101: %v", err)
	}
	switchDone := time.Now()
	t.Logf("published token 101 (previous %d), confirmed on both in %s", got.Previous, got.Took.Round(time.Millisecond))
	for i := range p.urls {
		wantDenied(t, fmt.Sprintf("apiserver %d: first write with the old token 100", i), writeEvent(t, asScheduler(sup[i], "100"), "old"))
		if err := writeEvent(t, asScheduler(sup[i], "101"), "new"); err != nil {
			t.Errorf("apiserver %d: new token: %v", i, err)
		}
	}
	// An older term cannot take the parameter back.
	if _, err := pub.Publish(ctx, 100); !errors.Is(err, apifence.ErrNewerToken) {
		t.Errorf("publish 100 after 101: %v, want ErrNewerToken", err)
	}

	// Pods need their namespace's default service account; no
	// controller-manager runs here to create it.
	for _, ns := range []string{"default", "kube-system"} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("gate", func(t *testing.T) { testGate(t, p, sup[0]) })
	t.Run("scheduler", func(t *testing.T) { testRealScheduler(t, p, sup[0]) })
	t.Run("controller-manager", func(t *testing.T) { testRealControllerManager(t, p, sup[0]) })
	t.Run("performance", func(t *testing.T) { testPerformance(t, p, sup[0]) })
	t.Run("audit", func(t *testing.T) { judgeAudit(t, p, switchStart, switchDone) })
	t.Run("fence", func(t *testing.T) { testFenceTokenMode(t, p, sup) })
	t.Run("gate-mode-follows", func(t *testing.T) { testGateModeFollows(t, p, sup) })
}
