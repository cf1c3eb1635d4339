package agent

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// podBooks is what the agent runs, and since when no apiserver answered.
type podBooks struct {
	running map[types.UID]Running
	lost    bool
}

func (a *Agent) runPods(ctx context.Context) {
	t := time.NewTicker(PodsEvery)
	defer t.Stop()
	for {
		a.SyncPods(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// SyncPods is one pass: list the node's pods at the first apiserver that
// answers and do what Decide says; with none answering, keep everything.
func (a *Agent) SyncPods(ctx context.Context) {
	if a.pods.running == nil {
		a.pods.running = map[types.UID]Running{}
	}
	var remote []corev1.Pod
	var via kubernetes.Interface
	err := a.each(ctx, func(ctx context.Context, c kubernetes.Interface) error {
		l, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + a.Node})
		if err == nil {
			remote, via = l.Items, c
		}
		return err
	})
	if err != nil {
		if !a.pods.lost {
			a.pods.lost = true
			a.record(Record{Event: EventLost, Pods: len(a.pods.running), Reason: "no apiserver answers: pods kept running"})
			a.Log.Warn("agent: no apiserver answers; keeping the pods running", "node", a.Node, "pods", len(a.pods.running), "err", err)
		}
		return
	}
	if a.pods.lost {
		a.pods.lost = false
		a.record(Record{Event: EventFound, Pods: len(a.pods.running)})
	}
	a.apply(ctx, via, Decide(a.pods.running, a.mine(remote)))
}

func (a *Agent) mine(pods []corev1.Pod) []corev1.Pod {
	out := pods[:0:0]
	for _, p := range pods {
		if !a.Ignore[p.Namespace] && p.Spec.NodeName == a.Node {
			out = append(out, p)
		}
	}
	return out
}

// apply stops first (a pod and its successor never run on one node at
// once by the agent's doing), then starts, reports and acknowledges.
// Failed writes are retried by the next pass: the decision is made again.
func (a *Agent) apply(ctx context.Context, c kubernetes.Interface, d Decision) {
	for _, s := range d.Stop {
		delete(a.pods.running, s.UID)
		a.record(Record{Event: EventStop, Namespace: s.Namespace, Name: s.Name, UID: s.UID, Reason: s.Reason})
	}
	for _, p := range d.Start {
		a.pods.running[p.UID] = runningOf(p)
		a.record(Record{Event: EventStart, Namespace: p.Namespace, Name: p.Name, UID: p.UID})
		a.warn("report running", p, a.reportRunning(ctx, c, p))
	}
	for _, p := range d.Status {
		a.warn("report running", p, a.reportRunning(ctx, c, p))
	}
	for _, p := range d.Ack {
		a.warn("acknowledge deletion", p, a.acknowledge(ctx, c, p))
	}
}

func (a *Agent) warn(what string, p corev1.Pod, err error) {
	if err != nil && !apierrors.IsNotFound(err) {
		a.Log.Warn("agent: "+what, "node", a.Node, "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

func (a *Agent) record(r Record) {
	r.At, r.Node = time.Now(), a.Node
	if err := a.PodLog.Write(r); err != nil {
		a.Log.Warn("agent: pod log", "err", err)
	}
}

// reportRunning writes the status a kubelet writes once the containers
// run: phase Running, every condition true, a running state per container.
func (a *Agent) reportRunning(ctx context.Context, c kubernetes.Interface, p corev1.Pod) error {
	now := metav1.Now()
	st := p.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized,
		corev1.ContainersReady, corev1.PodReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	st.ContainerStatuses = nil
	started := true
	for _, ctr := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: ctr.Name, Image: ctr.Image,
			ImageID: "kha-lab://" + ctr.Image, ContainerID: "kha-lab://" + string(p.UID) + "/" + ctr.Name,
			Ready: true, Started: &started, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: *st.StartTime}}})
	}
	p.Status = *st
	_, err := c.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
	return err
}

// acknowledge completes a graceful deletion: delete with grace period 0,
// for this very pod (a successor of the same name has another UID).
func (a *Agent) acknowledge(ctx context.Context, c kubernetes.Interface, p corev1.Pod) error {
	zero := int64(0)
	uid := p.UID
	err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsConflict(err) {
		return errors.Join(err, errors.New("(a successor of the same name exists)"))
	}
	return err
}

// RunningPods is what the agent runs now (for tests and the log).
func (a *Agent) RunningPods() []Running {
	var out []Running
	for _, r := range a.pods.running {
		out = append(out, r)
	}
	return out
}
