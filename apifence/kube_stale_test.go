//go:build kube

package apifence_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
)

// tokenFence installs what `kha-supervisor api-fence manifests` prints for
// token mode and starts the supervisor's side of it (apifence.Fence in
// token mode, as the daemon builds it from [api_fence]) with upstreams in
// their order: the first is the node's own apiserver. It returns once the
// fence is in force on both apiservers (a token of "0" is refused).
func tokenFence(t *testing.T, p *plane, ups []*rest.Config) *apifence.Fence {
	t.Helper()
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	state := filepath.Join(t.TempDir(), "state")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	f, err := apifence.New(apifence.Options{Mode: apifence.ModeToken, Upstreams: ups, StateDir: state, ClientCAs: p.ca.Pool(),
		ConfirmTimeout: 20 * time.Second, Group: "test", Webhook: addr})
	if err != nil {
		t.Fatal(err)
	}
	f.Serve() // the webhook answers before its registration is applied
	t.Cleanup(f.Close)
	local, err := localca.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	install(t, admin, apifence.Build(apifence.ManifestOptions{
		Webhook: apifence.WebhookClient{URL: "https://" + addr + apifence.WebhookPath, CABundle: local.PEM()}}).Objects())
	for i := range p.urls {
		c := rest.CopyConfig(ups[0])
		c.Host = p.urls[i]
		deadline := time.Now().Add(time.Minute)
		for {
			err := writeEventDry(t, asScheduler(c, "0"), "zero")
			if apifence.IsPolicyDenial(err) || time.Now().After(deadline) {
				wantDenied(t, fmt.Sprintf("apiserver %d: token 0 before the first publish", i), err)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return f
}

// signal sends sig to apiserver i's process.
func (p *plane) signal(t *testing.T, i int, sig syscall.Signal) {
	t.Helper()
	id, ok := p.servers[i].Running()
	if !ok {
		t.Fatalf("apiserver %d is not running", i)
	}
	if err := syscall.Kill(id.PID, sig); err != nil {
		t.Fatalf("signal %v to apiserver %d (PID %d): %v", sig, i, id.PID, err)
	}
}

// TestAPIFenceRefusesTheOldTokenOnAThawedApiserver: issue 23 item 1. A
// master paused together with its own apiserver: the other master
// publishes a new token and excuses the frozen apiserver (it gives no
// answer); on the thaw, the paused master's gate (still open: its clock
// was stopped too) sends the writes it had queued, and more, with the old
// token to its own apiserver, whose admission cache still holds the old
// token. Here the apiserver's process is stopped with SIGSTOP while the
// parameter moves through the other one; the writes it gets within 500 ms
// of SIGCONT carry the old token, as scenario 52 sends them (the
// scheduler, impersonated). None may be stored.
//
//	flock /work/logs/heavy.lock go test -tags kube -timeout 20m -run TestAPIFenceRefusesTheOldToken ./apifence/
func TestAPIFenceRefusesTheOldTokenOnAThawedApiserver(t *testing.T) {
	p := startPlane(t)
	// One supervisor stands for both masters here: the publisher (the
	// other master) and the webhook that both apiservers call (on a real
	// master each calls its own node's, whose read goes to its own
	// apiserver first; here the reads go to apiserver 0, which stays up:
	// a read through the frozen one would hang until the webhook gives up
	// and refuses, and both apiservers call this one webhook).
	sup := []*rest.Config{p.config(t, 0, apifence.DefaultSupervisorUser), p.config(t, 1, apifence.DefaultSupervisorUser)}
	f := tokenFence(t, p, sup)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := f.Publish(ctx, 100); err != nil {
		t.Fatalf("publish 100: %v", err)
	}
	for trial := range 2 {
		old, next := int64(100+trial), int64(101+trial)
		p.signal(t, 1, syscall.SIGSTOP)
		thawed := false
		thaw := func() {
			if !thawed {
				thawed = true
				p.signal(t, 1, syscall.SIGCONT)
			}
		}
		t.Cleanup(thaw)
		start := time.Now()
		if err := f.Publish(ctx, next); err != nil {
			thaw()
			t.Fatalf("trial %d: publish %d with apiserver 1 frozen: %v", trial, next, err)
		}
		st := f.Status()
		t.Logf("trial %d: published %d with apiserver 1 frozen in %s (the frozen one excused)", trial, next, time.Since(start).Round(time.Millisecond))
		if st.Handover == nil || st.Handover.Token != next {
			t.Errorf("trial %d: handover %+v", trial, st.Handover)
		}
		accepted, refused, failed := sendStale(t, p, sup[1], old, thaw)
		t.Logf("trial %d: writes with the old token %d at the thawed apiserver within 500 ms: %d stored, %d refused by the fence, %d other errors",
			trial, old, accepted, refused, failed)
		if accepted > 0 {
			t.Errorf("trial %d: the thawed apiserver stored %d writes carrying the old token %d after %d was published", trial, accepted, old, next)
		}
	}
}

// sendStale queues 30 writes with token at the frozen apiserver, thaws it
// 300 ms later, and sends one more every 20 ms for 500 ms after the thaw.
// Real writes (not dry runs): accepted means stored.
func sendStale(t *testing.T, p *plane, frozen *rest.Config, token int64, thaw func()) (accepted, refused, failed int64) {
	var ok, denied, other atomic.Int64
	var wg sync.WaitGroup
	c := asScheduler(frozen, fmt.Sprint(token))
	c.Timeout = 30 * time.Second
	send := func(name string) {
		defer wg.Done()
		switch err := writeEvent(t, c, name); {
		case err == nil:
			ok.Add(1)
		case apifence.IsPolicyDenial(err):
			denied.Add(1)
		default:
			other.Add(1)
			t.Logf("write %s: %v", name, err)
		}
	}
	for i := range 30 {
		wg.Add(1)
		go send(fmt.Sprintf("queued-%d", i))
	}
	time.Sleep(300 * time.Millisecond)
	thaw()
	for i := range 25 {
		wg.Add(1)
		go send(fmt.Sprintf("after-thaw-%d", i))
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	return ok.Load(), denied.Load(), other.Load()
}

// TestAPIFenceHealedApiserverStaleness: issue 23 item 2. Apiserver 1 is
// cut from etcd (a silent partition of its etcd connections) long enough
// for its client to give up its connections, the other master publishes
// a new token (apiserver 1 is excused: its etcd check fails), then the cut
// heals. Its storage works again at once; its parameter informer follows
// only after its watch is re-established. Dry-run writes carrying the old
// and the new token, every 50 ms, measure the window: the old token must
// never be admitted, and the figures (how long the new one is still
// refused) go to docs/architecture.md.
//
//	flock /work/logs/heavy.lock go test -tags kube -timeout 30m -run TestAPIFenceHealedApiserver ./apifence/
func TestAPIFenceHealedApiserverStaleness(t *testing.T) {
	p := startPlaneWith(t, true)
	sup := []*rest.Config{p.config(t, 0, apifence.DefaultSupervisorUser), p.config(t, 1, apifence.DefaultSupervisorUser)}
	f := tokenFence(t, p, sup)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	if err := f.Publish(ctx, 200); err != nil {
		t.Fatalf("publish 200: %v", err)
	}
	cut := cutFor()
	for trial := range 3 {
		old, next := int64(200+trial), int64(201+trial)
		p.etcdCut.Blackhole(true)
		t.Cleanup(func() { p.etcdCut.Blackhole(false) })
		time.Sleep(cut / 2)
		if err := f.Publish(ctx, next); err != nil {
			t.Fatalf("trial %d: publish %d with apiserver 1 cut from etcd: %v", trial, next, err)
		}
		if h := f.Status().Handover; h != nil {
			t.Logf("trial %d: published %d with apiserver 1 cut from etcd in %d ms", trial, next, h.Took.Milliseconds())
		}
		time.Sleep(cut / 2)
		p.etcdCut.Blackhole(false)
		w := probeWindow(ctx, p, sup[1], old, next)
		t.Logf("trial %d (cut %s): after the heal, old token %d admitted by %d of %d probes (last at +%d ms); new token %d first admitted at +%d ms, refused by %d probes before",
			trial, cut, old, w.oldAdmitted, w.probes, w.lastOld.Milliseconds(), next, w.firstNew.Milliseconds(), w.newRefused)
		if w.oldAdmitted > 0 {
			t.Errorf("trial %d: the healed apiserver admitted %d dry-run writes carrying the old token %d after %d was published", trial, w.oldAdmitted, old, next)
		}
		if w.firstNew < 0 {
			t.Errorf("trial %d: the healed apiserver never admitted the new token %d within 60 s", trial, next)
		}
	}
}

// cutFor is how long apiserver 1 is cut from etcd in each trial: 60 s (the
// issue's), KHA_TEST_ETCD_CUT to change it.
func cutFor() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("KHA_TEST_ETCD_CUT")); err == nil && d > 0 {
		return d
	}
	return time.Minute
}

type window struct {
	probes, oldAdmitted, newRefused int
	lastOld, firstNew               time.Duration
}

// probeWindow probes the healed apiserver every 50 ms with a dry-run
// write carrying the old token and one carrying the new, until the new
// one has been admitted for 2 s in a row (or 60 s).
func probeWindow(ctx context.Context, p *plane, healed *rest.Config, old, next int64) window {
	w := window{firstNew: -1}
	heal := time.Now()
	var newSince time.Time
	for time.Since(heal) < time.Minute && ctx.Err() == nil {
		w.probes++
		at := time.Since(heal)
		if err := dryRun(ctx, healed, old); err == nil {
			w.oldAdmitted++
			w.lastOld = at
		}
		switch err := dryRun(ctx, healed, next); {
		case err == nil && w.firstNew < 0:
			w.firstNew, newSince = at, time.Now()
		case err == nil && time.Since(newSince) > 2*time.Second:
			return w
		case err != nil:
			w.newRefused++
			w.firstNew, newSince = -1, time.Time{}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return w
}

func dryRun(ctx context.Context, c *rest.Config, token int64) error {
	c = asScheduler(c, fmt.Sprint(token))
	c.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Events("default").Create(ctx, event("heal-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}
