package scenario

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Scenario 60 (real plane, issue 22): the leader's rack is cut while its
// controller-manager creates a burst of pods (a ReplicaSet scaled from 0
// to burstPods just before the cut) and its scheduler binds them, and is
// healed burstHeal after the cut began, each way one batched route change:
// after the other master's first writes (kha-fast: 8.0-8.6 s after the cut
// in the first trials) and before the cut apiserver's 10 s TCP user
// timeout on its etcd connections ends them, so whatever is still queued
// on them reaches etcd after the new term's first writes. Judged at etcd:
// a write of the old term committed after the new term's first write
// fails the trial. (Healed instead once the other master served, the
// first trials healed 23-27 s after the cut, past the TCP user timeout:
// the prober's ReplicaSet pod is replaced only after the burst.)
func init() {
	s := &burstTrial{}
	registerReal(plane.Spec{ID: 60, Name: "real: rack cut during a burst of creates, healed at the takeover",
		Fault:   fmt.Sprintf("a ReplicaSet scaled 0 -> %d, the scheduler leader's rack cut %s later and healed %s after the cut began", burstPods, burstLead, burstHeal),
		Prepare: s.prepare, Inject: s.inject, Judge: s.judge})
	// Scenario 66 (issue 22 item 2): the same burst and cut, healed the
	// moment the prober sees the other master act (its scheduler binding
	// or its controller-manager replacing a pod), so the heal lands after
	// the new term's first writes whenever the takeover comes inside
	// burstHeal, before the cut apiserver's TCP user timeout drops its
	// queued frames; at the latest burstHeal after the cut (then before the
	// takeover, as scenario 60).
	s66 := &burstTrial{healOnTakeover: true}
	registerReal(plane.Spec{ID: 66, Name: "real: rack cut during a burst of creates, healed at the other master's first act",
		Fault:   fmt.Sprintf("a ReplicaSet scaled 0 -> %d, the scheduler leader's rack cut %s later and healed when the other master acts (at the latest %s after the cut)", burstPods, burstLead, burstHeal),
		Prepare: s66.prepare, Inject: s66.inject, Judge: s66.judge})
}

const (
	burstNS      = "kha-burst"
	burstRS      = "burst"
	burstPods    = 150
	burstLead    = 150 * time.Millisecond // scale to cut: the first creates in flight
	burstTimeout = 2 * time.Minute
	// burstHeal: after the takeover's first writes, inside the TCP user
	// timeout (10 s from the first unacknowledged frame, sent at the cut).
	burstHeal = 9 * time.Second
)

type burstTrial struct {
	healed chan error
	// healOnTakeover (scenario 66): heal as soon as the prober sees the
	// other master act (a probe pod created after the cut bound, or a
	// ReplicaSet pod deleted after it replaced), at the latest burstHeal
	// after the cut began.
	healOnTakeover bool
	// healBy, when set, replaces burstHeal as the latest heal.
	healBy time.Duration
	// cut, when set, replaces the leader's rack cut (leaderRackCut): the
	// two sides of the partition.
	cut func(t *plane.Trial) (a, b []string)
}

// latestHeal is how long after the cut the heal comes at the latest.
func (s *burstTrial) latestHeal() time.Duration {
	if s.healBy > 0 {
		return s.healBy
	}
	return burstHeal
}

// prepare leaves the burst ReplicaSet at zero pods.
func (s *burstTrial) prepare(ctx context.Context, t *plane.Trial) error {
	err := t.R.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: burstNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		_, err = c.AppsV1().ReplicaSets(burstNS).Create(ctx, burstReplicaSet(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = scaleBurst(ctx, c, 0)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("burst ReplicaSet: %w", err)
	}
	deadline := time.Now().Add(burstTimeout)
	for {
		var n int
		err := t.R.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error {
			l, err := c.CoreV1().Pods(burstNS).List(ctx, metav1.ListOptions{})
			if err == nil {
				n = len(l.Items)
			}
			return err
		})
		if err == nil && n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("burst pods still %d after %s (err %v)", n, burstTimeout, err)
		}
		time.Sleep(time.Second)
	}
}

func burstReplicaSet() *appsv1.ReplicaSet {
	zero, none := int64(0), int32(0)
	labels := map[string]string{"app": burstRS}
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: burstRS, Namespace: burstNS},
		Spec: appsv1.ReplicaSetSpec{Replicas: &none, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					TerminationGracePeriodSeconds: &zero,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}}}
}

func scaleBurst(ctx context.Context, c kubernetes.Interface, n int32) error {
	sc, err := c.AppsV1().ReplicaSets(burstNS).GetScale(ctx, burstRS, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sc.Spec.Replicas = n
	_, err = c.AppsV1().ReplicaSets(burstNS).UpdateScale(ctx, burstRS, sc, metav1.UpdateOptions{})
	return err
}

// inject scales the burst up through the leader's apiserver, cuts the
// leader's rack burstLead later and heals it (in the background) burstHeal
// after the cut began; the trial's heal waits for that heal.
func (s *burstTrial) inject(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
	if err := t.R.AnyFrom(ctx, t.Leader, func(ctx context.Context, c kubernetes.Interface) error { return scaleBurst(ctx, c, burstPods) }); err != nil {
		return nil, fmt.Errorf("scale the burst: %w", err)
	}
	time.Sleep(burstLead)
	topo := t.R.P.Lab.Topo
	sides := leaderRackCut
	if s.cut != nil {
		sides = s.cut
	}
	a, b := sides(t)
	t.Notef("cut %v from %v", a, b)
	t.Mark("cut")
	if err := topo.Cut(ctx, a, b); err != nil {
		return nil, err
	}
	t.Mark("cut_done")
	s.healed = make(chan error, 1)
	go func() {
		err := s.waitHeal(ctx, t)
		t.Mark("heal")
		herr := topo.Heal(context.WithoutCancel(ctx), a, b)
		t.Mark("healed")
		s.healed <- errors.Join(err, herr)
	}()
	return func(ctx context.Context) error {
		select {
		case err := <-s.healed:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil
}

// waitHeal waits until the heal is due: burstHeal after the cut began, or
// (healOnTakeover) the first sign of the other master acting if earlier.
func (s *burstTrial) waitHeal(ctx context.Context, t *plane.Trial) error {
	latest := t.Marks["cut"].Add(s.latestHeal())
	for time.Now().Before(latest) {
		if s.healOnTakeover && tookOver(t.R.Prober.Snapshot(), t.Marks["cut_done"]) {
			t.Mark("takeover_seen")
			return nil
		}
		wait := 50 * time.Millisecond
		if !s.healOnTakeover {
			wait = time.Until(latest)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// tookOver: a probe pod created after since is bound, or a ReplicaSet pod
// deleted after since was replaced (only the other master can, its rack
// being cut).
func tookOver(snap probe.Snapshot, since time.Time) bool {
	for _, p := range snap.Pods {
		if p.Created.After(since) && !p.Bound.IsZero() {
			return true
		}
	}
	for _, d := range snap.Deletions {
		if d.At.After(since) && !d.Replaced.IsZero() {
			return true
		}
	}
	return false
}

// judge records when the heal landed after the cut.
func (s *burstTrial) judge(t *plane.Trial, _ []audit.Event, res *report.Result) {
	cut, heal, healed := t.Marks["cut"], t.Marks["heal"], t.Marks["healed"]
	if cut.IsZero() || healed.IsZero() {
		res.Problems = append(res.Problems, "burst: never cut or never healed")
		return
	}
	if res.Figures.Values == nil {
		res.Figures.Values = map[string]float64{}
	}
	res.Figures.Values["cut_ms"] = float64(t.Marks["cut_done"].Sub(cut).Milliseconds())
	res.Figures.Values["heal_after_cut_ms"] = float64(heal.Sub(cut).Milliseconds())
	res.Figures.Values["heal_ms"] = float64(healed.Sub(heal).Milliseconds())
	res.Notes = append(res.Notes, fmt.Sprintf("burst of %d: cut in %s, healed %s after the cut (in %s)", burstPods,
		t.Marks["cut_done"].Sub(cut).Round(time.Millisecond), heal.Sub(cut).Round(time.Millisecond), healed.Sub(heal).Round(time.Millisecond)))
	if !s.healOnTakeover {
		return
	}
	if seen, ok := t.Marks["takeover_seen"]; ok {
		res.Figures.Values["takeover_seen_ms"] = float64(seen.Sub(cut).Milliseconds())
		res.Notes = append(res.Notes, fmt.Sprintf("healed on the other master's first act, seen %s after the cut: inside the TCP user timeout", seen.Sub(cut).Round(time.Millisecond)))
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("the other master had not acted %s after the cut: healed before the takeover (not the point this scenario aims at)", s.latestHeal()))
	}
}
