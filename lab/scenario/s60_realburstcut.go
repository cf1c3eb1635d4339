package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
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
	plane.Register(plane.Scenario{ID: 60, Name: "real: rack cut during a burst of creates, healed at the takeover",
		Fault:   fmt.Sprintf("a ReplicaSet scaled 0 -> %d, the scheduler leader's rack cut %s later and healed %s after the cut began", burstPods, burstLead, burstHeal),
		Prepare: s.prepare, Inject: s.inject, Judge: s.judge})
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
	rack := "r1"
	if t.Leader != "m1" {
		rack = "r2"
	}
	other := map[string]string{"r1": "r2", "r2": "r1"}[rack]
	a, b := topo.InRack(rack), slices.Concat(topo.InRack("etcd"), topo.InRack(other))
	t.Mark("cut")
	if err := topo.Cut(ctx, a, b); err != nil {
		return nil, err
	}
	t.Mark("cut_done")
	s.healed = make(chan error, 1)
	go func() {
		var err error
		select {
		case <-time.After(time.Until(t.Marks["cut"].Add(burstHeal))):
		case <-ctx.Done():
			err = ctx.Err()
		}
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

// judge records when the heal landed after the cut.
func (s *burstTrial) judge(t *plane.Trial, _ []audit.Event, res *plane.Result) {
	cut, heal, healed := t.Marks["cut"], t.Marks["heal"], t.Marks["healed"]
	if cut.IsZero() || healed.IsZero() {
		res.Problems = append(res.Problems, "burst: never cut or never healed")
		return
	}
	if res.Figures == nil {
		res.Figures = map[string]float64{}
	}
	res.Figures["cut_ms"] = float64(t.Marks["cut_done"].Sub(cut).Milliseconds())
	res.Figures["heal_after_cut_ms"] = float64(heal.Sub(cut).Milliseconds())
	res.Figures["heal_ms"] = float64(healed.Sub(heal).Milliseconds())
	res.Notes = append(res.Notes, fmt.Sprintf("burst of %d: cut in %s, healed %s after the cut (in %s)", burstPods,
		t.Marks["cut_done"].Sub(cut).Round(time.Millisecond), heal.Sub(cut).Round(time.Millisecond), healed.Sub(heal).Round(time.Millisecond)))
}
