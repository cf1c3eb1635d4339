package plane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Spec is what the real plane's runner needs of a scenario: the fault and
// its heal, and the hooks around them. The scenarios are declared, and
// found, in lab/scenario's one registry (scenario.Lookup); their Spec is
// the real-plane part of scenario.Scenario.
type Spec struct {
	ID    int
	Name  string
	Fault string
	// Inject injects the fault on the trial's leader and returns how to
	// undo it (nil: nothing to undo).
	Inject func(ctx context.Context, t *Trial) (heal func(context.Context) error, err error)
	// Optional hooks of a scenario that watches more than the failover
	// (scenario 50's pods). Prepare runs before the fault, untimed (its
	// workload); Hold after the service resumed, before the heal (it keeps
	// the fault in place until what it waits for happened); After after
	// the heal and the steady plane, before the judgement (it waits for
	// the aftermath and fills the timeline, facts and problems).
	Prepare func(ctx context.Context, t *Trial) error
	Hold    func(ctx context.Context, t *Trial) error
	After   func(ctx context.Context, t *Trial, res *report.Result)
	// Judge, when set, adds the scenario's own verdict from the audit
	// events of the trial's window (fence.go).
	Judge func(t *Trial, evs []audit.Event, res *report.Result)
	// Balanced runs the trial with the components' kubeconfig through
	// each master's local balancer (Balancer) instead of its own apiserver.
	Balanced bool
	// Layout, when set, is the only etcd layout the fault is defined in
	// (lab.LayoutSeparate: it cuts a master from "the etcd rack", which
	// holds one member when stacked; lab.LayoutStacked: it moves raft
	// leadership in or out of the cut rack). Run refuses the other.
	Layout string
}

// Lookup finds a registered scenario's Spec (scenario.RealSpec).
type Lookup func(id int) (Spec, bool)

// Trial is one scenario run in one mode.
type Trial struct {
	R      *Runner
	Mode   Mode
	Leader string // the scheduler's leader at the fault
	Nodes  map[string]*master.Node
	// Marks are instants, Figs figures the scenario records for its Judge.
	Marks map[string]time.Time
	Figs  map[string]float64
	Notes []string // what the fault saw, for the result
}

// Figures records a figure of the fault for the Judge.
func (t *Trial) Figures(name string, v float64) {
	if t.Figs == nil {
		t.Figs = map[string]float64{}
	}
	t.Figs[name] = v
}

// Mark records now under name.
func (t *Trial) Mark(name string) {
	if t.Marks == nil {
		t.Marks = map[string]time.Time{}
	}
	t.Marks[name] = time.Now()
}

// Node is the leader's master.
func (t *Trial) Node() *master.Node { return t.Nodes[t.Leader] }

// Standby is the other master.
func (t *Trial) Standby() string { return other(t.Leader) }

// Notef adds a note to the trial's result.
func (t *Trial) Notef(f string, a ...any) { t.Notes = append(t.Notes, fmt.Sprintf(f, a...)) }

// Runner runs trials against a lab that is up with the real plane.
type Runner struct {
	P       *Plane
	Prober  *probe.Prober
	Clients []kubernetes.Interface
	mode    string
	ctx     context.Context // the runner's life: the balancer's
	lb      *Balancer
}

// NewRunner attaches to the plane and starts the prober (until ctx ends).
func NewRunner(ctx context.Context, p *Plane) (*Runner, error) {
	cfgs, err := p.AdminConfigs()
	if err != nil {
		return nil, err
	}
	// The typed clients (the scenarios') and the prober share each
	// apiserver's connection: the prober's steady traffic keeps it fresh.
	// With a client of their own, a scenario's first write after a fault
	// could go out on a pooled connection already closed under it ("use
	// of closed network connection", scenarios 50 and 52).
	pr := &probe.Prober{Log: p.Log}
	var cs []kubernetes.Interface
	for i, c := range cfgs {
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			return nil, fmt.Errorf("plane: client of %s: %w", lab.MasterNames[i], err)
		}
		typed, err := kubernetes.NewForConfigAndClient(c, hc)
		if err != nil {
			return nil, fmt.Errorf("plane: client of %s: %w", lab.MasterNames[i], err)
		}
		cs = append(cs, typed)
		pr.Servers = append(pr.Servers, kubeapi.FromHTTP(hc, c.Host))
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitFor(sctx, "the probe namespace and ReplicaSet", func() error { return pr.Setup(sctx) }); err != nil {
		return nil, err
	}
	go pr.Run(ctx)
	return &Runner{P: p, Prober: pr, Clients: cs, ctx: ctx}, nil
}

func waitFor(ctx context.Context, what string, f func() error) error {
	var last error
	for {
		if last = f(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("plane: waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Use switches the components to mode on both masters (nothing when it is
// the current one) and waits until the plane is steady in it.
func (r *Runner) Use(ctx context.Context, mode Mode) error {
	nodes, err := r.P.Lab.Masters()
	if err != nil {
		return err
	}
	if mode.Balanced && r.lb == nil {
		if r.lb, err = StartBalancer(r.ctx, r.P); err != nil {
			return err
		}
	}
	if r.mode != mode.key() {
		r.P.Log.Info("plane: mode", "mode", mode.Name, "balanced", mode.Balanced)
		// Every supervisor first: stopping the leader's while the other
		// runs would hand the units over on the way (a handoff the trial
		// did not ask for).
		for _, m := range lab.MasterNames {
			if err := stop(ctx, nodes[m], lab.SupervisorUnit); err != nil {
				return err
			}
		}
		for _, m := range lab.MasterNames {
			n := nodes[m]
			if err := stop(ctx, n, kube.Scheduler, kube.ControllerManager); err != nil {
				return err
			}
			if err := r.P.WriteUnits(ctx, n, mode); err != nil {
				return err
			}
		}
		if err := r.P.ApplyFence(ctx, mode); err != nil {
			return err
		}
		for _, m := range lab.MasterNames {
			if err := r.start(ctx, nodes[m], mode); err != nil {
				return err
			}
		}
		r.mode = mode.key()
	}
	_, err = r.Steady(ctx, mode, 3*time.Minute)
	return err
}

const leMask = "# Written by kha-lab: leader-election mode, the components run without kha-supervisor.\n" +
	"# Masks the drop-in of the same name (install-dropins', or the package's in /usr/lib).\n"

func maskPath(u string) string { return master.UnitDir + "/" + u + ".service.d/50-kha-supervisor.conf" }

// unmask removes the leader-election masks (only the lab's own).
func unmask(n *master.Node) error {
	for _, u := range Units {
		b, err := os.ReadFile(filepath.Join(n.Root(), maskPath(u)))
		if err == nil && string(b) == leMask {
			if err := n.RemoveFile(maskPath(u)); err != nil {
				return err
			}
		}
	}
	return nil
}

// start brings one master's components up in mode: the supervisor (which
// starts them on the leader) or, with leader election, the units
// themselves without the supervisor's guard.
func (r *Runner) start(ctx context.Context, n *master.Node, mode Mode) error {
	if !mode.LeaderElect {
		// install-dropins refuses to overwrite a drop-in it did not
		// write ("exists and was not written by kha-supervisor"): the
		// leader-election mask goes first.
		if err := unmask(n); err != nil {
			return err
		}
		return r.P.StartSupervisor(ctx, n, mode)
	}
	// An empty drop-in of the same name in /etc masks kha-supervisor's:
	// removing install-dropins' copy is not enough when the lab was
	// brought up with --deb, whose package ships the same drop-in in
	// /usr/lib (seen: "A dependency job for kube-scheduler.service
	// failed", BindsTo= the stopped supervisor). install-dropins
	// overwrites the mask when the mode goes back to kha-supervisor.
	for _, u := range Units {
		if err := n.WriteFile(maskPath(u), []byte(leMask), 0o644); err != nil {
			return err
		}
	}
	if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	_, err := n.Systemctl(ctx, append([]string{"start"}, Units...)...)
	return err
}

// Leaders names the master whose scheduler and controller-manager lead:
// under kha-supervisor the one running them, with leader election the
// holder of each component's Lease.
func (r *Runner) Leaders(ctx context.Context, mode Mode) (sched, cm string, err error) {
	if !mode.LeaderElect {
		nodes, err := r.P.Lab.Masters()
		if err != nil {
			return "", "", err
		}
		var on []string
		for _, m := range lab.MasterNames {
			if st, _ := nodes[m].ActiveState(ctx, kube.Scheduler); st == "active" {
				if st2, _ := nodes[m].ActiveState(ctx, kube.ControllerManager); st2 == "active" {
					on = append(on, m)
				}
			}
		}
		if len(on) != 1 {
			return "", "", fmt.Errorf("components active on %v, want exactly one master", on)
		}
		return on[0], on[0], nil
	}
	sched, err = r.leaseHolder(ctx, kube.Scheduler, mode)
	if err != nil {
		return "", "", err
	}
	cm, err = r.leaseHolder(ctx, kube.ControllerManager, mode)
	return sched, cm, err
}

func (r *Runner) leaseHolder(ctx context.Context, name string, mode Mode) (string, error) {
	var errs []error
	for _, c := range r.Clients {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := c.CoordinationV1().Leases("kube-system").Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if l.Spec.HolderIdentity == nil || l.Spec.RenewTime == nil {
			return "", fmt.Errorf("lease %s not held", name)
		}
		lease := mode.Lease
		if lease == 0 {
			lease = 15 * time.Second
		}
		if time.Since(l.Spec.RenewTime.Time) > lease {
			return "", fmt.Errorf("lease %s held by %s but not renewed for %s", name, *l.Spec.HolderIdentity, time.Since(l.Spec.RenewTime.Time).Round(time.Second))
		}
		for _, m := range lab.MasterNames {
			if strings.HasPrefix(*l.Spec.HolderIdentity, master.MachineName(r.P.Lab.Config().Prefix, m)+"_") {
				return m, nil
			}
		}
		return "", fmt.Errorf("lease %s held by %q: no master of this lab", name, *l.Spec.HolderIdentity)
	}
	return "", errors.Join(errs...)
}

// Steady waits until one master leads, a probe pod created since is bound
// and a ReplicaSet pod deleted since was replaced: both components act. A
// Lease alone is not enough: right after a mode switch it still names the
// stopped process, renewed less than a lease duration ago (seen: the fault
// then hit a plane whose controller-manager had no live leader).
func (r *Runner) Steady(ctx context.Context, mode Mode, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var leader string
	since := time.Now()
	err := waitFor(ctx, "a steady plane in mode "+mode.Name, func() error {
		snap := r.Prober.Snapshot()
		bound, replaced := false, false
		for _, p := range snap.Pods {
			bound = bound || (p.Created.After(since) && !p.Bound.IsZero())
		}
		for _, d := range snap.Deletions {
			replaced = replaced || (d.At.After(since) && !d.Replaced.IsZero())
		}
		if !bound || !replaced {
			return fmt.Errorf("since %s: a new pod bound %v, a deleted ReplicaSet pod replaced %v", since.Format("15:04:05"), bound, replaced)
		}
		s, _, err := r.Leaders(ctx, mode)
		leader = s
		return err
	})
	return leader, err
}

// stop stops units, again when systemd cancels the job (a restart of the
// unit that was queued meanwhile: "Job for kha-supervisor.service
// canceled").
func stop(ctx context.Context, n *master.Node, units ...string) error {
	var err error
	for range 3 {
		if _, err = n.Systemctl(ctx, append([]string{"stop"}, units...)...); err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}
