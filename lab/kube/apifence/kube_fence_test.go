//go:build kube

package apifence_test

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/fencing"
)

// testFenceTokenMode: the composition the daemon runs (apifence.Fence in
// token mode, as built from [api_fence]) against both apiservers. The gate
// stays closed through an open term until Publish has written and
// confirmed the term's token; the component's writes then pass; Cut closes
// the gate at once, and the next term's Publish makes this term's token
// stale at the resource.
func testFenceTokenMode(t *testing.T, p *plane, sup []*rest.Config) {
	var token atomic.Int64
	token.Store(102)
	f, sched := fenceWithGate(t, p, sup, apifence.ModeToken, token.Load)
	if err := writeEvent(t, sched, "fence-before-publish"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("before Publish: %v, want 503 from the closed gate", err)
	}
	if err := f.Publish(t.Context(), 102); err != nil {
		t.Fatalf("Publish(102): %v", err)
	}
	if st := f.Status(); st.Token != 102 || st.Mode != apifence.ModeToken {
		t.Errorf("status %+v, want token 102 in token mode", st)
	}
	if err := writeEvent(t, sched, "fence-after-publish"); err != nil {
		t.Errorf("after Publish: %v, want admitted", err)
	}
	f.Cut()
	// The first write may still go out on the pooled connection that Cut
	// closed, before the client's read loop has seen the close (a loaded
	// machine): it fails on that connection, which is also a refusal. The
	// next one dials afresh and gets the gate's 503.
	err := writeEvent(t, sched, "fence-after-cut")
	if err != nil && !apierrors.IsServiceUnavailable(err) && !apierrors.IsUnexpectedServerError(err) && !isConnErr(err) {
		t.Errorf("after Cut: %v, want 503 from the gate or the cut connection's error", err)
	}
	if err == nil {
		t.Error("after Cut: a write was admitted")
	}
	if err := writeEvent(t, sched, "fence-after-cut-2"); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("after Cut, second write: %v, want 503 from the gate", err)
	}
	// Another member's next term.
	other := &apifence.Publisher{Endpoints: sup}
	if _, err := other.Publish(t.Context(), 103); err != nil {
		t.Fatal(err)
	}
	for i := range sup {
		wantDenied(t, "token 102 after 103 was published", writeEvent(t, asScheduler(sup[i], "102"), "fence-stale"))
	}
	// This member, resumed, tries to publish its old term again: refused.
	if err := f.Publish(t.Context(), 102); err == nil {
		t.Error("an old term re-published its token over a newer one")
	}
}

// isConnErr: the request failed on its connection (reset, broken pipe,
// EOF), not with an answer.
func isConnErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
}

// testGateModeFollows (issue 23 item 5e): the rollout's step 4 installs
// the enforcing policy while the masters still run in gate mode. A
// gate-mode leader promoted then (token 110, the parameter at an older
// term's 103) writes its token into the parameter itself, so its units'
// writes are admitted within moments. On the code before, gate mode never
// wrote the parameter and every write of the new term was refused.
func testGateModeFollows(t *testing.T, p *plane, sup []*rest.Config) {
	f, sched := fenceWithGate(t, p, sup, apifence.ModeGate, func() int64 { return 110 })
	start := time.Now()
	if err := f.Publish(t.Context(), 110); err != nil {
		t.Fatalf("gate-mode Publish(110): %v", err)
	}
	var last error
	for i := 0; time.Since(start) < 10*time.Second; i++ {
		if last = writeEvent(t, sched, fmt.Sprintf("gate-follows-%d", i)); last == nil {
			t.Logf("a write through the gate-mode leader's gate admitted %s after its promotion", time.Since(start).Round(time.Millisecond))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Errorf("10 s after a gate-mode promotion its units' writes are still refused: %v", last)
	}
	for i := range sup {
		wantDenied(t, fmt.Sprintf("apiserver %d: token 103 after the gate-mode term 110", i), writeEvent(t, asScheduler(sup[i], "103"), "gate-follows-stale"))
	}
}

// fenceWithGate is the composition the daemon runs (apifence.Fence in mode,
// a gate for the scheduler) against the apiservers sup, its term open for
// an hour with token(), served; and a client of the scheduler through
// that gate. The fence is closed when the test ends.
func fenceWithGate(t *testing.T, p *plane, sup []*rest.Config, mode string, token func() int64) (*apifence.Fence, *rest.Config) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	f, err := apifence.New(apifence.Options{Mode: mode, Upstreams: sup, StateDir: state, ClientCAs: p.ca.Pool(),
		Gates: []apifence.GateSpec{{Unit: "kube-scheduler.service", Addr: "127.0.0.1:0"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	f.SetTerm(func() fencing.Term {
		d := fencing.NewDeadlineClock(fencing.Window{TTL: time.Hour, StopMax: time.Second}, fencing.IdentityClock{})
		d.Renewed("election", time.Now(), time.Hour)
		return d.Term(fencing.Term{State: "active", Token: token(), Open: true})
	})
	f.Serve()
	local, err := localca.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	sched := rest.CopyConfig(p.config(t, 0, "system:kube-scheduler"))
	sched.Host = "https://" + f.Status().Gates["kube-scheduler.service"]
	sched.TLSClientConfig.CAFile, sched.TLSClientConfig.CAData = "", local.PEM()
	return f, sched
}
