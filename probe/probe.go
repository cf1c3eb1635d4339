// Package probe is the user-visible side of a failover: from the lab's
// observer namespace (which no fault touches) it creates a pod every 200 ms
// with nodeName unset and records when each was created, and keeps a
// ReplicaSet of one whose pod it deletes periodically, recording when the
// controller-manager replaced it. It talks to both apiservers as a client
// behind a load balancer would: whichever answers.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// Defaults.
const (
	DefaultNamespace = "kha-probe"
	RSName           = "probe-rs"
	CreateEvery      = 200 * time.Millisecond
	DeleteEvery      = 2 * time.Second
	request          = 1500 * time.Millisecond
)

// Pod is one probe pod.
type Pod struct {
	Name    string
	Created time.Time // the create was answered 201
	Bound   time.Time // first seen with spec.nodeName (zero: not yet)
	Node    string
}

// Deletion is one ReplicaSet pod the prober deleted.
type Deletion struct {
	Pod      string
	At       time.Time
	Replaced time.Time // first sight of a new pod of the ReplicaSet (zero: not yet)
}

const namespacesPath = "/api/v1/namespaces"

// The label that marks a namespace as the probe's own.
const (
	ownerLabel = "app.kubernetes.io/managed-by"
	ownerValue = "kha-supervisor-probe"
)

// ForeignNamespaceError: the prober's namespace exists and was not created
// by a prober; it is left alone (Setup fails, Cleanup would delete it).
type ForeignNamespaceError struct{ Namespace string }

func (e *ForeignNamespaceError) Error() string {
	return fmt.Sprintf("namespace %s exists and is not the probe's own (label %s=%s): name another", e.Namespace, ownerLabel, ownerValue)
}

// Prober runs the probes. Servers are tried in order, the last one that
// answered first.
type Prober struct {
	Servers []*kubeapi.Client
	// Namespace is the prober's own (DefaultNamespace when empty): it
	// creates it, and Cleanup deletes it with everything in it.
	Namespace string
	Log       *slog.Logger

	mu        sync.Mutex
	seq       int
	pods      map[string]*Pod
	order     []string
	deletions []*Deletion
	rsSeen    map[string]bool
	maxExtra  int // most ReplicaSet pods seen at once beyond replicas (1)
	extraAt   time.Time
	preferred int
}

// Snapshot is what the prober saw, copied.
type Snapshot struct {
	Pods      []Pod
	Deletions []Deletion
	MaxExtra  int
	ExtraAt   time.Time
}

// ns is the prober's namespace.
func (p *Prober) ns() string {
	if p.Namespace == "" {
		return DefaultNamespace
	}
	return p.Namespace
}

func (p *Prober) podsPath() string { return namespacesPath + "/" + p.ns() + "/pods" }

// Setup creates the namespace and the ReplicaSet (idempotent).
func (p *Prober) Setup(ctx context.Context) error {
	return p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		err := c.Do(ctx, http.MethodPost, namespacesPath, nil, &corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: p.ns(), Labels: map[string]string{ownerLabel: ownerValue}}}, nil)
		if apierrors.IsAlreadyExists(err) {
			// Cleanup deletes the namespace with everything in it: only
			// the probe's own (an earlier run's) may be reused.
			var ns corev1.Namespace
			if err = c.Do(ctx, http.MethodGet, namespacesPath+"/"+p.ns(), nil, nil, &ns); err == nil && ns.Labels[ownerLabel] != ownerValue {
				return &ForeignNamespaceError{p.ns()}
			}
		}
		if err != nil {
			return err
		}
		one := int32(1)
		labels := map[string]string{"app": RSName}
		err = c.Do(ctx, http.MethodPost, "/apis/apps/v1/namespaces/"+p.ns()+"/replicasets", nil, &appsv1.ReplicaSet{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
			ObjectMeta: metav1.ObjectMeta{Name: RSName},
			Spec: appsv1.ReplicaSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec()}},
		}, nil)
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	})
}

func podSpec() corev1.PodSpec {
	zero := int64(0)
	return corev1.PodSpec{
		Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		TerminationGracePeriodSeconds: &zero,
		// The prober's pods never run; they must not hold a Node.
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
	}
}

// any runs fn on the preferred server, then on the others.
func (p *Prober) any(ctx context.Context, fn func(context.Context, *kubeapi.Client) error) error {
	p.mu.Lock()
	first := p.preferred
	p.mu.Unlock()
	var errs []error
	for i := range p.Servers {
		k := (first + i) % len(p.Servers)
		rctx, cancel := context.WithTimeout(ctx, request)
		err := fn(rctx, p.Servers[k])
		cancel()
		if err == nil {
			p.mu.Lock()
			p.preferred = k
			p.mu.Unlock()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Run probes until ctx ends.
func (p *Prober) Run(ctx context.Context) {
	p.mu.Lock()
	if p.pods == nil {
		p.pods, p.rsSeen = map[string]*Pod{}, map[string]bool{}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, loop := range []struct {
		every time.Duration
		fn    func(context.Context)
	}{{CreateEvery, p.createOne}, {CreateEvery, p.observe}, {DeleteEvery, p.deleteRSPod}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(loop.every)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					loop.fn(ctx)
				}
			}
		}()
	}
	wg.Wait()
}

func (p *Prober) createOne(ctx context.Context) {
	p.mu.Lock()
	p.seq++
	name := fmt.Sprintf("p-%d-%06d", time.Now().Unix()%100000, p.seq)
	p.mu.Unlock()
	err := p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		err := c.Do(ctx, http.MethodPost, p.podsPath(), nil, &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "probe"}}, Spec: podSpec()}, nil)
		if apierrors.IsAlreadyExists(err) {
			return nil // the first try timed out after the apiserver had taken it
		}
		return err
	})
	if err != nil {
		return // the pod does not exist: not a probe
	}
	p.mu.Lock()
	p.pods[name] = &Pod{Name: name, Created: time.Now()}
	p.order = append(p.order, name)
	p.mu.Unlock()
}

// unboundKept is how long a probe pod may stay unbound before observe
// deletes it: far beyond any bound a trial judges (90 s), and short enough
// that a stalled scheduler does not pile up thousands of pods whose LIST
// times out at a loaded apiserver (5136 in a real-plane soak).
const unboundKept = 2 * time.Minute

// observe lists the namespace: binds, ReplicaSet pods, and deletes bound
// probe pods (they would only pile up: nothing runs them), its own left
// unbound longer than unboundKept, and those of earlier probers that are
// bound or as old.
func (p *Prober) observe(ctx context.Context) {
	var list corev1.PodList
	if err := p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		list = corev1.PodList{}
		return c.Do(ctx, http.MethodGet, p.podsPath(), nil, nil, &list)
	}); err != nil {
		return
	}
	now := time.Now()
	var done []string
	p.mu.Lock()
	active := 0
	for _, pod := range list.Items {
		if pod.Labels["app"] == RSName {
			if pod.DeletionTimestamp == nil {
				active++
			}
			if !p.rsSeen[pod.Name] {
				p.rsSeen[pod.Name] = true
				for _, d := range p.deletions {
					if d.Replaced.IsZero() && d.Pod != pod.Name {
						d.Replaced = now
					}
				}
			}
			continue
		}
		rec, ok := p.pods[pod.Name]
		switch {
		case ok && pod.Spec.NodeName != "":
			if rec.Bound.IsZero() {
				rec.Bound, rec.Node = now, pod.Spec.NodeName
			}
			done = append(done, pod.Name)
		case ok && now.Sub(rec.Created) > unboundKept:
			// Its record stays: the figures count it unbound.
			done = append(done, pod.Name)
		case !ok && pod.Labels["app"] == "probe" && (pod.Spec.NodeName != "" || now.Sub(pod.CreationTimestamp.Time) > unboundKept):
			done = append(done, pod.Name) // an earlier prober's
		}
	}
	if active-1 > p.maxExtra {
		p.maxExtra, p.extraAt = active-1, now
	}
	p.mu.Unlock()
	for _, name := range done {
		_ = p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
			err := p.deletePod(ctx, c, name)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		})
	}
}

// deleteRSPod deletes the ReplicaSet's pod once the last deletion was
// replaced: each deletion then measures one replacement.
func (p *Prober) deleteRSPod(ctx context.Context) {
	p.mu.Lock()
	if n := len(p.deletions); n > 0 && p.deletions[n-1].Replaced.IsZero() {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	var victim string
	_ = p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		var l corev1.PodList
		if err := c.Do(ctx, http.MethodGet, p.podsPath(), url.Values{"labelSelector": {"app=" + RSName}}, nil, &l); err != nil {
			return err
		}
		for _, pod := range l.Items {
			if pod.DeletionTimestamp == nil {
				victim = pod.Name
				return nil
			}
		}
		return nil
	})
	if victim == "" {
		return
	}
	// Recorded before the call: the controller-manager may replace the
	// pod before Delete returns, and a replacement seen before its
	// deletion was recorded would leave the deletion "unreplaced" forever
	// (seen: every later deletion waited on it, the figure stuck at the
	// trial's timeout).
	d := &Deletion{Pod: victim, At: time.Now()}
	p.mu.Lock()
	p.deletions = append(p.deletions, d)
	p.mu.Unlock()
	if err := p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		return p.deletePod(ctx, c, victim)
	}); err != nil {
		p.mu.Lock()
		p.deletions = slices.DeleteFunc(p.deletions, func(x *Deletion) bool { return x == d })
		p.mu.Unlock()
	}
}

// deletePod deletes a pod of the namespace at once (grace period 0).
func (p *Prober) deletePod(ctx context.Context, c *kubeapi.Client, name string) error {
	zero := int64(0)
	return c.Do(ctx, http.MethodDelete, p.podsPath()+"/"+name, nil,
		&metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"}, GracePeriodSeconds: &zero}, nil)
}

// Snapshot copies what was seen so far.
func (p *Prober) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{MaxExtra: p.maxExtra, ExtraAt: p.extraAt}
	for _, n := range p.order {
		s.Pods = append(s.Pods, *p.pods[n])
	}
	for _, d := range p.deletions {
		s.Deletions = append(s.Deletions, *d)
	}
	return s
}

// ResetExtra starts counting ReplicaSet pods beyond replicas anew (one
// scenario's worth).
func (p *Prober) ResetExtra() {
	p.mu.Lock()
	p.maxExtra, p.extraAt = 0, time.Time{}
	p.mu.Unlock()
}

// Cleanup deletes the prober's namespace and everything in it (a drill
// against a real cluster leaves nothing behind).
func (p *Prober) Cleanup(ctx context.Context) error {
	return p.any(ctx, func(ctx context.Context, c *kubeapi.Client) error {
		err := c.Do(ctx, http.MethodDelete, namespacesPath+"/"+p.ns(), nil, nil, nil)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// Figures is what a user of the cluster saw of one failover, from an
// instant (the fault, a drill's request) to the end of the observation.
type Figures struct {
	// FirstBind is from the instant to the binding of the first probe pod
	// created after it (Bound false: none was bound).
	FirstBind time.Duration
	Bound     bool
	// LongestUnbound is the longest a probe pod created in the window
	// waited for its binding (one still unbound counts until the end).
	LongestUnbound time.Duration
	// FirstReplaced is from the instant to the replacement of the first
	// ReplicaSet pod deleted after it (Replaced false: none was replaced);
	// LongestUnreplaced the longest any deletion in the window waited.
	FirstReplaced     time.Duration
	Replaced          bool
	LongestUnreplaced time.Duration
}

// Figures computes the user's view between from and end.
func (s Snapshot) Figures(from, end time.Time) Figures {
	var f Figures
	for _, p := range s.Pods {
		if p.Created.Before(from) && (p.Bound.IsZero() || p.Bound.After(from)) {
			// created before and still waiting at the instant: its wait
			// after the instant counts too
		} else if p.Created.Before(from) || p.Created.After(end) {
			continue
		}
		bound := p.Bound
		if bound.IsZero() || bound.After(end) {
			bound = end
		} else if !p.Created.Before(from) && (!f.Bound || bound.Sub(from) < f.FirstBind) {
			f.FirstBind, f.Bound = bound.Sub(from), true
		}
		f.LongestUnbound = max(f.LongestUnbound, bound.Sub(p.Created))
	}
	for _, d := range s.Deletions {
		if d.At.Before(from) || d.At.After(end) {
			continue
		}
		done := d.Replaced
		if done.IsZero() || done.After(end) {
			done = end
		} else if !f.Replaced || done.Sub(from) < f.FirstReplaced {
			f.FirstReplaced, f.Replaced = done.Sub(from), true
		}
		f.LongestUnreplaced = max(f.LongestUnreplaced, done.Sub(d.At))
	}
	return f
}
