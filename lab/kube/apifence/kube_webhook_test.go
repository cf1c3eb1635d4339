//go:build kube

package apifence_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// TestAPIFenceWebhookAgainstRealAPIServers: two real kube-apiservers
// v1.37.2 on one etcd with the webhook registered instead of the policy
// (what a cluster older than 1.30 runs), served by apifence.Fence on
// loopback with its local CA. The token handover (Publish: write, then
// dry-run confirmation on both apiservers) works through the webhook
// unchanged; the current token is admitted, stale and missing ones are
// refused, other users are unaffected. Then a gate whose first apiserver
// is down forwards to the second.
//
//	go test -tags kube -timeout 20m -run TestAPIFenceWebhook ./lab/kube/apifence/
func TestAPIFenceWebhookAgainstRealAPIServers(t *testing.T) {
	p := startPlane(t)
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	sup := []*rest.Config{p.config(t, 0, apifence.DefaultSupervisorUser), p.config(t, 1, apifence.DefaultSupervisorUser)}
	state := filepath.Join(t.TempDir(), "state")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	f, err := apifence.New(apifence.Options{Mode: apifence.ModeToken, Upstreams: sup, StateDir: state, ClientCAs: p.ca.Pool(),
		Webhook: addr, ConfirmTimeout: time.Minute, SelfCheckEvery: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.Serve()
	t.Cleanup(f.Close)
	local, err := localca.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	objs := apifence.BuildWebhook(apifence.WebhookOptions{URL: "https://" + addr + apifence.WebhookPath, CABundle: local.PEM()})
	install(t, admin, objs)

	// Before the first publish nothing fenced is admitted, not even "0".
	// Dry runs, until the apiserver's informer has the configuration.
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
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := f.Publish(ctx, 100); err != nil {
		t.Fatalf("publish 100 through the webhook: %v", err)
	}
	t.Logf("published token 100 and confirmed on both apiservers through the webhook in %s", time.Since(start).Round(time.Millisecond))
	for i := range p.urls {
		at := fmt.Sprintf("apiserver %d", i)
		if err := writeEvent(t, asScheduler(sup[i], "100"), "current"); err != nil {
			t.Errorf("%s: impersonated write with the current token: %v, want admitted", at, err)
		}
		wantDenied(t, at+": stale token 99", writeEvent(t, asScheduler(sup[i], "99"), "stale"))
		wantDenied(t, at+": no token", writeEvent(t, asScheduler(sup[i], ""), "none"))
		wantDenied(t, at+": the scheduler's own certificate, directly", writeEvent(t, p.config(t, i, "system:kube-scheduler"), "direct"))
		sa := rest.CopyConfig(sup[i])
		sa.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:kube-system:replicaset-controller"}
		if err := writeEvent(t, sa, "sa"); !apifence.IsPolicyDenial(err) && !apierrors.IsForbidden(err) {
			t.Errorf("%s: controller service account without token: %v, want refused", at, err)
		}
		if err := writeEvent(t, p.config(t, i, "admin", "system:masters"), "admin"); err != nil {
			t.Errorf("%s: the admin (not a managed user) was affected: %v", at, err)
		}
	}

	// A new term: the old token is refused on the very first request.
	start = time.Now()
	if err := f.Publish(ctx, 101); err != nil {
		t.Fatalf("publish 101: %v", err)
	}
	t.Logf("published token 101, confirmed on both in %s", time.Since(start).Round(time.Millisecond))
	for i := range p.urls {
		wantDenied(t, fmt.Sprintf("apiserver %d: first write with the old token 100", i), writeEvent(t, asScheduler(sup[i], "100"), "old"))
		if err := writeEvent(t, asScheduler(sup[i], "101"), "new"); err != nil {
			t.Errorf("apiserver %d: new token: %v", i, err)
		}
	}
	st := f.Status()
	if st.Token != 101 || st.Webhook == nil || st.Webhook.Denied == 0 || st.Webhook.Admitted == 0 {
		t.Errorf("status %+v, want token 101 and the webhook's decisions", st)
	}
	t.Logf("webhook decisions: %+v", *st.Webhook)

	t.Run("gate-failover", func(t *testing.T) { testGateFailover(t, p, sup[1]) })
	t.Run("registration-check", func(t *testing.T) { testRegistrationCheck(t, p, f, sup[1], objs) })
}

// testRegistrationCheck (issue 23 items 1 and 6): the leader's self-check
// reads the webhook's registration with the supervisor's own credential
// (its RBAC allows it); deleted, status says WEBHOOK OFF within a few
// checks; re-applied, the finding clears.
func testRegistrationCheck(t *testing.T, p *plane, f *apifence.Fence, sup *rest.Config, objs []any) {
	api, err := kubeapi.New(sup)
	if err != nil {
		t.Fatal(err)
	}
	if problem, err := apifence.WebhookProblem(t.Context(), api); err != nil || problem != "" {
		t.Fatalf("registration in place: problem %q, %v; want none", problem, err)
	}
	// The first apiserver is down since gate-failover: the second.
	admin := clientset(t, p.config(t, 1, "admin", "system:masters"))
	if err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(t.Context(), apifence.PolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitWebhookOff := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := f.Status().WebhookOff
			if (want == "" && got == "") || (want != "" && strings.Contains(got, want)) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("status WebhookOff %q after 10 s, want %q", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitWebhookOff("is missing")
	if line := apifence.AlarmText(nil, nil, f.Status().WebhookOff); !strings.Contains(line, "WEBHOOK OFF") {
		t.Errorf("alarm text %q, want WEBHOOK OFF", line)
	}
	install(t, admin, objs[len(objs)-1:])
	waitWebhookOff("")
}

// testGateFailover: a gate whose first apiserver is down (nothing listens:
// a stopped kube-apiserver) forwards the scheduler's writes to the second.
func testGateFailover(t *testing.T, p *plane, live *rest.Config) {
	dead := rest.CopyConfig(live)
	dead.Host = fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	gd := startGate(t, p, 101, dead, live)
	g, tb := gd.g, gd.term
	sched := gd.throughGate(p.config(t, 0, "system:kube-scheduler"))
	for i := range 3 {
		if err := writeEvent(t, sched, fmt.Sprintf("failover-%d", i)); err != nil {
			t.Fatalf("write %d through a gate whose first apiserver is down: %v", i, err)
		}
	}
	if hosts, down := g.Upstreams(); len(down) != 1 || down[0] != dead.Host {
		t.Errorf("upstreams %v, down %v: want %s down", hosts, down, dead.Host)
	}
	tb.set(gate.Term{Open: true, Token: 100})
	wantDenied(t, "failed-over gate holding the previous term", writeEvent(t, sched, "stale"))
	tb.set(gate.Term{Open: true, Token: 101})

	// A real kube-apiserver killed under a gate that was using it.
	first := rest.CopyConfig(live)
	first.Host = p.urls[0]
	gd2 := startGate(t, p, 101, first, live)
	g2 := gd2.g
	sched2 := gd2.throughGate(p.config(t, 0, "system:kube-scheduler"))
	if err := writeEvent(t, sched2, "before-kill"); err != nil {
		t.Fatalf("through the gate, both apiservers up: %v", err)
	}
	if err := p.servers[0].Stop(t.Context(), 10*time.Second); err != nil {
		t.Fatalf("stop apiserver 0: %v", err)
	}
	// The first write may go out on the pooled connection to the dead
	// apiserver before its close is seen: it fails (never silently resent).
	// After that every write goes to apiserver 1.
	failed := 0
	for i := range 5 {
		if err := writeEvent(t, sched2, fmt.Sprintf("after-kill-%d", i)); err != nil {
			if failed++; failed > 1 || i > 0 {
				t.Errorf("write %d after apiserver 0 was killed: %v", i, err)
			}
		}
	}
	if _, down := g2.Upstreams(); len(down) != 1 || down[0] != p.urls[0] {
		t.Errorf("down %v, want the killed %s", down, p.urls[0])
	}
	// Those writes were admitted by apiserver 1 through the webhook, whose
	// parameter reads failed over from the dead apiserver 0 too.
	t.Logf("apiserver 0 killed: %d of 5 writes through the gate failed (a pooled connection), the others went to apiserver 1", failed)
}
