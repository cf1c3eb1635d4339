// Package agent is the lab's stand-in for a kubelet: it registers one Node,
// renews its Lease and refreshes its Ready condition, so the scheduler has
// somewhere to bind pods and the node lifecycle controller sees a live
// node. It runs no containers, but it keeps the books a kubelet would on
// the pods bound to its node (sync.go): it "runs" them and reports them
// Running, keeps them while no apiserver answers, and stops them and
// acknowledges their deletion once one does; its pod log says which pod
// ran on which node when.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Intervals as a kubelet's, shortened: the lease every 2 s (kubelet: 10 s
// of a 40 s lease), the status every 10 s.
const (
	LeaseEvery    = 2 * time.Second
	StatusEvery   = 10 * time.Second
	LeaseDuration = 40 * time.Second
	PodsEvery     = time.Second
	requestBudget = 3 * time.Second
)

// Agent keeps one Node alive through the first apiserver that answers.
type Agent struct {
	Node    string
	Clients []kubernetes.Interface // in order of preference
	Log     *slog.Logger
	PodLog  *PodLog
	// Ignore: namespaces whose pods the agent leaves alone (the prober's:
	// created every 200 ms and deleted once bound, running them would only
	// add writes).
	Ignore map[string]bool

	pods podBooks
}

// FromKubeconfigs builds the clients, one per kubeconfig.
func FromKubeconfigs(node string, paths []string, log *slog.Logger) (*Agent, error) {
	if node == "" || len(paths) == 0 {
		return nil, errors.New("agent: --node and at least one --kubeconfig are required")
	}
	a := &Agent{Node: node, Log: log}
	for _, p := range paths {
		cfg, err := clientcmd.BuildConfigFromFlags("", p)
		if err != nil {
			return nil, fmt.Errorf("agent: kubeconfig %s: %w", p, err)
		}
		cfg.Timeout = requestBudget
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		a.Clients = append(a.Clients, cs)
	}
	return a, nil
}

// Run keeps the node alive and runs its pods until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() { defer close(done); a.runPods(ctx) }()
	defer func() { <-done }()
	lastStatus := time.Time{}
	t := time.NewTicker(LeaseEvery)
	defer t.Stop()
	for {
		if err := a.each(ctx, a.renewLease); err != nil {
			a.Log.Warn("agent: lease", "node", a.Node, "err", err)
		}
		if time.Since(lastStatus) >= StatusEvery {
			if err := a.each(ctx, a.reportStatus); err != nil {
				a.Log.Warn("agent: status", "node", a.Node, "err", err)
			} else {
				lastStatus = time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// each tries fn with every client until one succeeds.
func (a *Agent) each(ctx context.Context, fn func(context.Context, kubernetes.Interface) error) error {
	var errs []error
	for _, c := range a.Clients {
		err := fn(ctx, c)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *Agent) renewLease(ctx context.Context, c kubernetes.Interface) error {
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		secs := int32(LeaseDuration.Seconds())
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.Node, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &a.Node, LeaseDurationSeconds: &secs, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// room is what the node offers the scheduler: plenty, the lab's pods are
// never run.
var room = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("64"),
	corev1.ResourceMemory: resource.MustParse("256Gi"),
	corev1.ResourcePods:   resource.MustParse("5000"),
}

func (a *Agent) reportStatus(ctx context.Context, c kubernetes.Interface) error {
	nodes := c.CoreV1().Nodes()
	n, err := nodes.Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		n, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.Node,
			Labels: map[string]string{"kubernetes.io/hostname": a.Node, "kha-lab/agent": "true"}}}, metav1.CreateOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kha-lab node agent", LastHeartbeatTime: now, LastTransitionTime: now}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready.LastTransitionTime = cond.LastTransitionTime
		}
	}
	n.Status.Capacity, n.Status.Allocatable = room, room
	n.Status.Conditions = []corev1.NodeCondition{ready}
	_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}
