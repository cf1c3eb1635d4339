package plane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// The faults of the fence's scenarios (51-54) that need the plane's
// certificates or namespaces.

// StaleScheduler is a client of master server's apiserver that sends as
// the scheduler of a term whose token is token: the supervisor's
// credential impersonating system:kube-scheduler with that token extra,
// exactly what a resumed gate of that term forwards, dialled from master
// from's network namespace (the audit log attributes it to that master).
func (p *Plane) StaleScheduler(from, server string, token int64) (kubernetes.Interface, error) {
	cfg, err := p.clientAt(from, server, supervisorUser)
	if err != nil {
		return nil, err
	}
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:kube-scheduler",
		Extra: map[string][]string{gate.TokenExtra: {strconv.FormatInt(token, 10)}}}
	return kubernetes.NewForConfig(cfg)
}

// SchedulerAt is a client of master server's apiserver with the
// scheduler's own certificate (user system:kube-scheduler), dialled from
// master from's network namespace: a scheduler of that master's term as
// the apiserver sees it in mode off, where no gate or token is involved.
func (p *Plane) SchedulerAt(from, server string) (kubernetes.Interface, error) {
	cfg, err := p.clientAt(from, server, "system:kube-scheduler")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// clientAt is the configuration of a client of master server's apiserver
// with user's certificate, dialled from master from's network namespace,
// without a client-side rate limit: a resumed gate forwards its queue at
// once (scenarios 58, 59 and 65 queue a burst at a frozen apiserver).
func (p *Plane) clientAt(from, server, user string) (*rest.Config, error) {
	ca, err := p.CA()
	if err != nil {
		return nil, err
	}
	a, err := p.APIServer(server)
	if err != nil {
		return nil, err
	}
	pair, err := clientPair(ca, user)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            a.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return p.Lab.Topo.DialContext(ctx, from, network, addr)
		},
		Timeout: 5 * time.Second,
		QPS:     -1,
	}, nil
}

// HandScheduler starts a second kube-scheduler by hand in master m's
// network namespace, outside systemd and the supervisor, with the
// scheduler's real kubeconfig and certificate (the plane's file: straight
// at m's apiserver, no gate) and no leader election. It returns its log
// and how to stop it.
func (p *Plane) HandScheduler(m string) (log string, stop func(context.Context) error, err error) {
	c, err := p.Component(m, kube.Scheduler, KhaMode(p.Lab.Config().Profile))
	if err != nil {
		return "", nil, err
	}
	kc := filepath.Join(c.Dir, kube.Scheduler+".kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		return "", nil, fmt.Errorf("plane: the scheduler's kubeconfig on %s: %w", m, err)
	}
	dir := p.Dir("hand-" + m)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("plane: %w", err)
	}
	log, pid := filepath.Join(p.Lab.OutDir(), "hand-scheduler-"+m+".log"), filepath.Join(dir, "kube-scheduler.pid")
	// No secure port: its healthz is not what is judged, and serving would
	// need the unit's serving certificate (re-issuing the shared ones under
	// the running leader would reset its connections).
	argv := []string{"ip", "netns", "exec", p.Lab.Topo.NetNS(m), c.Binary, "--kubeconfig=" + kc,
		"--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc, "--leader-elect=false", "--secure-port=0", "-v=2"}
	if _, err := proc.Start(proc.Spec{Argv: argv, PIDFile: pid, LogFile: log}); err != nil {
		return "", nil, err
	}
	return log, func(ctx context.Context) error { return proc.Stop(ctx, pid, 2*time.Second) }, nil
}

// freezerRoot is the cgroup v1 freezer hierarchy of this host (hybrid
// cgroups: the masters' processes sit in its root).
const freezerRoot = "/sys/fs/cgroup/freezer"

// Freeze freezes every process of master n at once with the cgroup
// freezer, as a hypervisor pauses a VM: they are moved into a freezer
// cgroup of their own, which is then frozen (again until no process of
// the container is left outside: one may fork meanwhile). The kernel's
// clocks go on, unlike a paused VM whose hypervisor restores kvmclock:
// the supervisor sees its deadline passed at once on the thaw, so the lab
// shows the units' part of the resume, not a supervisor that believes its
// lease valid. Thaw undoes it. n's kube-apiserver is a process of the
// host in n's network namespace, outside the container: Freeze leaves it
// running (FreezeMaster freezes it too).
func (p *Plane) Freeze(n *master.Node) (thaw func() error, err error) {
	return p.freeze(n.Name, func(procs string) (int, error) { return moveNamespace(n.Leader, procs) })
}

// FreezeMaster freezes master n together with its own kube-apiserver, in
// one freezer cgroup frozen at one instant, as a paused VM that runs its
// apiserver stops whole: the apiserver's requests in flight (received,
// not yet sent to etcd) stay inside it until the thaw, which thaws both
// at once.
func (p *Plane) FreezeMaster(n *master.Node) (thaw func() error, err error) {
	a, err := p.APIServer(n.Name)
	if err != nil {
		return nil, err
	}
	// In the stacked layout the master's etcd member is a process of the
	// same paused VM: frozen with it, so that what it holds (its
	// apiserver's proposals, not yet forwarded to the raft leader)
	// resumes at the thaw too.
	member := p.Lab.StackedMember(n.Name)
	return p.freeze(n.Name, func(procs string) (int, error) {
		moved, err := moveNamespace(n.Leader, procs)
		if err != nil {
			return moved, err
		}
		m, err := moveAPIServer(a, procs)
		if moved += m; err != nil || member == "" {
			return moved, err
		}
		pid, ok := p.Lab.Etcd.PID(member)
		if !ok {
			return moved, fmt.Errorf("plane: freezer: etcd member %s is not running", member)
		}
		m, err = movePID("etcd member "+member, pid, procs)
		return moved + m, err
	})
}

// FreezeAPIServer freezes only master m's kube-apiserver (its master and
// components run on, their requests to it hang until the thaw).
func (p *Plane) FreezeAPIServer(m string) (thaw func() error, err error) {
	a, err := p.APIServer(m)
	if err != nil {
		return nil, err
	}
	return p.freeze(m+"-apiserver", func(procs string) (int, error) { return moveAPIServer(a, procs) })
}

// moveAPIServer moves a's process (every thread: cgroup v1's cgroup.procs
// moves the thread group) into procs' cgroup unless it is there; 1 when
// it moved it.
func moveAPIServer(a kube.APIServer, procs string) (int, error) {
	id, ok := a.Running()
	if !ok {
		return 0, fmt.Errorf("plane: freezer: no kube-apiserver running in %s", a.Dir)
	}
	return movePID("kube-apiserver", id.PID, procs)
}

// movePID moves process pid (what, for errors) into procs' cgroup unless
// it is there; 1 when it moved it.
func movePID(what string, id int, procs string) (int, error) {
	pid := strconv.Itoa(id)
	in, _ := os.ReadFile(procs)
	if slices.Contains(strings.Fields(string(in)), pid) {
		return 0, nil
	}
	if err := os.WriteFile(procs, []byte(pid), 0o644); err != nil {
		return 0, fmt.Errorf("plane: freezer: move %s %s: %w", what, pid, err)
	}
	return 1, nil
}

// freeze moves what collect moves into the freezer cgroup named for name
// and freezes it, until collect moves nothing more (a process may fork
// while being frozen).
func (p *Plane) freeze(name string, collect func(procs string) (int, error)) (thaw func() error, err error) {
	cg := filepath.Join(freezerRoot, p.Lab.Config().Prefix+"-freeze-"+name)
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return nil, fmt.Errorf("plane: freezer: %w", err)
	}
	thaw = func() error { return thawCgroup(cg) }
	for range 10 {
		moved, err := collect(filepath.Join(cg, "cgroup.procs"))
		if err != nil {
			return nil, errors.Join(err, thaw())
		}
		if err := os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("FROZEN"), 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("plane: freeze %s: %w", name, err), thaw())
		}
		if moved == 0 {
			return thaw, nil
		}
	}
	return nil, errors.Join(fmt.Errorf("plane: %s kept forking while being frozen", name), thaw())
}

// thawCgroup thaws freezer cgroup cg, moves its processes back to the
// root and removes it.
func thawCgroup(cg string) error {
	err := os.WriteFile(filepath.Join(cg, "freezer.state"), []byte("THAWED"), 0o644)
	// Thawed processes fork into the cgroup meanwhile (seen: "device
	// or resource busy" on the first removal): move until it is empty.
	// Threads and exiting tasks keep it busy a moment longer (seen
	// after the move loop alone): move what "tasks" lists too and
	// retry the removal for up to 5 s.
	var rmErr error
	for range 100 {
		for _, list := range []string{"cgroup.procs", "tasks"} {
			ids, _ := os.ReadFile(filepath.Join(cg, list))
			for _, id := range strings.Fields(string(ids)) {
				_ = os.WriteFile(filepath.Join(freezerRoot, list), []byte(id), 0o644)
			}
		}
		if rmErr = os.Remove(cg); rmErr == nil || errors.Is(rmErr, os.ErrNotExist) {
			rmErr = nil
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Join(err, rmErr)
}

// moveNamespace moves every process in pid1's PID namespace not yet in
// procs' cgroup there; it returns how many it moved.
func moveNamespace(pid1 int, procs string) (int, error) {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid1))
	if err != nil {
		return 0, fmt.Errorf("plane: %w", err)
	}
	in, _ := os.ReadFile(procs)
	have := map[string]bool{}
	for _, p := range strings.Fields(string(in)) {
		have[p] = true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("plane: %w", err)
	}
	moved := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil || have[e.Name()] {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		if err := os.WriteFile(procs, []byte(e.Name()), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			if _, serr := os.Stat("/proc/" + e.Name()); serr != nil {
				continue // exited meanwhile
			}
			return moved, fmt.Errorf("plane: freezer: move %s: %w", e.Name(), err)
		}
		moved++
	}
	return moved, nil
}
