package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Scenario 61 (real plane, issue 23 item 2): an apiserver that regains
// etcd. The leader's master is cut from the etcd rack for healedCut; the
// other master promotes and publishes its token while the cut master's
// apiserver, its storage gone, is excused from the confirmation. At the
// heal the apiserver's storage works again at once, but its parameter
// informer may stay behind (etcd cancels its watches, the watch cache
// re-lists, the informer re-watches with a growing backoff): the policy
// alone then admits the old token. From the heal on, the healed apiserver
// is probed every healProbeEvery with dry-run writes as the scheduler
// carrying the old and the new token. No old-token write may be admitted
// after the heal began; how long the new token stays refused there is
// measured (the gate sends such refusals on to the next apiserver).
func init() {
	registerReal(plane.Spec{ID: 61, Layout: lab.LayoutSeparate, Name: "real: an apiserver healed after an etcd cut across a takeover, old and new token probed at it",
		Fault:  "the leader's master cut from the etcd rack for 60 s (the other master promotes); healed, then dry-run writes with the old and the new token to its apiserver every 50 ms",
		Inject: injectHealedAPIServer,
		Judge:  judgeHealedAPIServer})
}

const (
	// healedCut is how long the apiserver is cut from etcd: long enough
	// for etcd to cancel its watches and for its informer's backoff to grow.
	healedCut = 60 * time.Second
	// healProbeEvery is the probe period at the healed apiserver.
	healProbeEvery = 50 * time.Millisecond
	// healProbeFor bounds the probing after the heal; it ends earlier once
	// both answers have been steady for healSteady.
	healProbeFor = 45 * time.Second
	healSteady   = 3 * time.Second
)

func injectHealedAPIServer(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
	p := t.R.P
	old, err := p.HeldToken(ctx)
	if err != nil || old == 0 {
		return nil, fmt.Errorf("the leader's token: %d, %v (token mode?)", old, err)
	}
	t.Figures("stale_token", float64(old))
	topo := p.Lab.Topo
	a, b := []string{t.Leader}, topo.InRack("etcd")
	cut := time.Now()
	if err := topo.Cut(ctx, a, b); err != nil {
		return func(ctx context.Context) error { return topo.Heal(ctx, a, b) }, err
	}
	t.Mark("cut")
	return func(ctx context.Context) error {
		if err := waitNewToken(ctx, p, old); err != nil {
			_ = topo.Heal(ctx, a, b)
			return err
		}
		cur, err := p.HeldToken(ctx)
		if err != nil {
			_ = topo.Heal(ctx, a, b)
			return err
		}
		t.Figures("new_token", float64(cur))
		if err := Sleep(ctx, time.Until(cut.Add(healedCut))); err != nil {
			_ = topo.Heal(ctx, a, b)
			return err
		}
		pr, err := newHealProbe(t, old, cur)
		if err != nil {
			_ = topo.Heal(ctx, a, b)
			return err
		}
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{})
		go func() { defer close(done); pr.run(pctx) }()
		t.Mark("heal-start")
		herr := topo.Heal(ctx, a, b)
		t.Mark("healed")
		pr.healed(t.Marks["heal-start"])
		<-done
		pr.figures(t)
		return herr
	}, nil
}

// healProbe sends dry-run events to one apiserver as the scheduler, with
// the old and the new token, and keeps each answer's time.
type healProbe struct {
	oldC, newC kubernetes.Interface
	mu         sync.Mutex
	from       time.Time // when the heal began (zero until then)
	answers    []healAnswer
	errs       []string
}

type healAnswer struct {
	at            time.Duration // since the heal began
	old, admitted bool
}

func newHealProbe(t *plane.Trial, old, cur int64) (*healProbe, error) {
	oc, err := t.R.P.StaleScheduler(t.Leader, t.Leader, old)
	if err != nil {
		return nil, err
	}
	nc, err := t.R.P.StaleScheduler(t.Leader, t.Leader, cur)
	if err != nil {
		return nil, err
	}
	return &healProbe{oldC: oc, newC: nc}, nil
}

func (h *healProbe) healed(at time.Time) { h.mu.Lock(); h.from = at; h.mu.Unlock() }

// run probes until ctx ends, healProbeFor after the heal, or both answers
// have been steady (old refused, new admitted) for healSteady.
func (h *healProbe) run(ctx context.Context) {
	tick := time.NewTicker(healProbeEvery)
	defer tick.Stop()
	for i := 0; ; i++ {
		var wg sync.WaitGroup
		for _, old := range []bool{true, false} {
			c := h.newC
			if old {
				c = h.oldC
			}
			wg.Go(func() { h.record(old, dryRunEvent(ctx, c, i)) })
		}
		wg.Wait()
		if h.settled() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *healProbe) record(old bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.from.IsZero() {
		return // before the heal began: the storage is gone, a dry run proves nothing
	}
	a := healAnswer{at: time.Since(h.from), old: old, admitted: err == nil}
	if err != nil && !apifence.IsPolicyDenial(err) {
		// Not the fence's answer (a timeout, the storage not back yet):
		// neither admitted nor a refusal by the fence.
		h.errs = append(h.errs, err.Error())
		return
	}
	h.answers = append(h.answers, a)
}

func (h *healProbe) settled() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.from.IsZero() {
		return false
	}
	since := time.Since(h.from)
	if since > healProbeFor {
		return true
	}
	for _, a := range h.answers {
		if a.at > since-healSteady && a.old == a.admitted {
			return false // an old token admitted or a new one refused lately
		}
	}
	return since > healSteady && len(h.answers) > 0
}

// figures records what the probe saw: the old token's admissions after the
// heal began (want none), the last of them, and until when the new token
// was refused (the healed apiserver's informer behind).
func (h *healProbe) figures(t *plane.Trial) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var oldAdm, oldRef, newAdm, newRef int
	var lastOld, lastNewRefused time.Duration = -1, -1
	for _, a := range h.answers {
		switch {
		case a.old && a.admitted:
			oldAdm++
			lastOld = max(lastOld, a.at)
		case a.old:
			oldRef++
		case a.admitted:
			newAdm++
		default:
			newRef++
			lastNewRefused = max(lastNewRefused, a.at)
		}
	}
	t.Figures("heal_old_admitted", float64(oldAdm))
	t.Figures("heal_old_refused", float64(oldRef))
	t.Figures("heal_new_admitted", float64(newAdm))
	t.Figures("heal_new_refused", float64(newRef))
	t.Figures("heal_old_last_admitted_ms", float64(lastOld.Milliseconds()))
	t.Figures("heal_new_last_refused_ms", float64(lastNewRefused.Milliseconds()))
	t.Figures("heal_probe_errors", float64(len(h.errs)))
	note := fmt.Sprintf("after the heal the healed apiserver admitted %d and refused %d dry-run writes with the old token, admitted %d and refused %d with the new",
		oldAdm, oldRef, newAdm, newRef)
	if lastOld >= 0 {
		note += fmt.Sprintf("; the old token last admitted %s after the heal began", lastOld.Round(time.Millisecond))
	}
	if lastNewRefused >= 0 {
		note += fmt.Sprintf("; the new token last refused %s after it", lastNewRefused.Round(time.Millisecond))
	}
	if len(h.errs) > 0 {
		es := slices.Compact(slices.Sorted(slices.Values(h.errs)))
		note += fmt.Sprintf("; %d other answers (first: %s)", len(h.errs), strings.TrimSpace(es[0]))
	}
	t.Notef("%s", note)
}

func dryRunEvent(ctx context.Context, c kubernetes.Interface, i int) error {
	now := metav1.NewTime(time.Now())
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := c.CoreV1().Events(probe.DefaultNamespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "heal-", Namespace: probe.DefaultNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: probe.DefaultNamespace, Name: fmt.Sprintf("heal-%d", i)},
		Reason:         "HealedAPIServer", Message: "scenario 61: a dry-run write at a healed apiserver", Type: "Normal",
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "default-scheduler"},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// judgeHealedAPIServer fails the trial on any old-token write admitted
// after the heal began, by the probe's count and at the audit log (dry
// runs included: a dry run admitted is a write that would be stored).
func judgeHealedAPIServer(t *plane.Trial, evs []audit.Event, res *report.Result) {
	from, ok := t.Marks["heal-start"]
	if !ok {
		res.Problems = append(res.Problems, "never healed")
		return
	}
	stale := fmt.Sprint(int64(res.Figures.Values["stale_token"]))
	acc := 0
	for _, e := range evs {
		if e.Received.Before(from) || !audit.Managed(e) || !e.Write() || len(e.Token) != 1 || e.Token[0] != stale || !e.Accepted() {
			continue
		}
		acc++
	}
	res.Figures.Values["heal_old_accepted_at_audit"] = float64(acc)
	probed := res.Figures.Values["heal_old_admitted"] + res.Figures.Values["heal_old_refused"]
	switch {
	case probed == 0:
		res.Problems = append(res.Problems, "no old-token probe answered by the fence after the heal")
	case res.Figures.Values["heal_old_admitted"] > 0 || acc > 0:
		res.Problems = append(res.Problems, fmt.Sprintf("the healed apiserver admitted the old token %s: %v dry runs of the probe, %d writes in the audit logs; want none",
			stale, res.Figures.Values["heal_old_admitted"], acc))
	}
}
