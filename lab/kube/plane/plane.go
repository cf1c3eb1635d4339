// Package plane runs the real Kubernetes control plane in the lab
// (`kha-lab up --plane real`): kube-apiserver on both masters all the time
// (a process the lab starts in each master's network namespace, with TLS,
// service-account keys, RBAC and audit logging, on its own etcd prefix),
// kube-scheduler and kube-controller-manager as the masters' managed units
// (or, for the comparison, on both masters with leader election), and a
// node agent per worker rack keeping Node objects w1 (R1) and w2 (R2)
// alive.
package plane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
	"github.com/kha-supervisor/kha-supervisor/probe"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// APIPort is the apiservers' secure port.
const APIPort = 6443

// EtcdPrefix keeps the control plane's objects apart from the supervisors'
// keys in the same etcd.
const EtcdPrefix = "/lab-kube"

// Ports of the components' secure (healthz) ports.
var componentPorts = map[string]int{kube.Scheduler: 10259, kube.ControllerManager: 10257}

// Workers are the Node objects, one per master rack.
var Workers = []Worker{{Name: "w1", Rack: "r1", Addr: "10.77.1.31", Near: "m1"}, {Name: "w2", Rack: "r2", Addr: "10.77.2.32", Near: "m2"}}

// Worker is one lab node agent's host.
type Worker struct {
	Name, Rack, Addr string
	Near             string // the master in its rack: its first apiserver
}

// Plane is the real control plane of one lab.
type Plane struct {
	Lab *lab.Lab
	Bin build.Binaries
	Log *slog.Logger
}

// New attaches the real plane to l (l.UsePlane).
func New(l *lab.Lab, bin build.Binaries, log *slog.Logger) *Plane {
	if log == nil {
		log = slog.Default()
	}
	p := &Plane{Lab: l, Bin: bin, Log: log}
	l.UsePlane(p)
	return p
}

// Dir is the plane's directory in the lab's shared directory; the masters
// see it at the same path (read-only), so kubeconfigs and unit files name
// one path for both sides.
func (p *Plane) Dir(elem ...string) string {
	return p.Lab.SharedPath(append([]string{"kube"}, elem...)...)
}

// Adjust adds the worker hosts and gives etcd its stock timing (100 ms
// heartbeat, 1 s election timeout), what operators run.
func (p *Plane) Adjust(t *topo.Topology, e *etcd.Cluster) {
	for _, w := range Workers {
		if _, err := t.Host(w.Name); err != nil {
			t.Hosts = append(t.Hosts, topo.Host{Name: w.Name, Rack: w.Rack, Addr: netip.MustParseAddr(w.Addr)})
		}
	}
	e.HeartbeatMS, e.ElectionMS = 100, 1000
}

// Binds are the binaries and the plane's directory, read-only, at their
// host paths.
func (p *Plane) Binds() []nspawn.Bind {
	return []nspawn.Bind{{Host: p.Bin.Dir, ReadOnly: true}, {Host: p.Dir(), ReadOnly: true}}
}

// CA is the control plane's CA (not the etcd CA: the controller-manager
// signs with its key, so it lives where the masters can read it).
func (p *Plane) CA() (*pki.CA, error) {
	dir := p.Dir("ca")
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); err == nil {
		return pki.LoadCA(dir)
	}
	if err := os.MkdirAll(p.Dir(), 0o755); err != nil {
		return nil, fmt.Errorf("plane: %w", err)
	}
	return pki.NewCA(dir)
}

// Dial connects from the observer's namespace, which reaches every lab
// host and which no fault touches.
func (p *Plane) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.Lab.Topo.DialContext(ctx, "obs", network, addr)
}

// APIServer is master m's apiserver.
func (p *Plane) APIServer(m string) (kube.APIServer, error) {
	ca, err := p.CA()
	if err != nil {
		return kube.APIServer{}, err
	}
	if p.Lab.Etcd.CA == nil {
		return kube.APIServer{}, errors.New("plane: the lab's etcd CA is not loaded (lab not up?)")
	}
	ec, err := p.Lab.Etcd.CA.Client(apiserverEtcdUser(m))
	if err != nil {
		return kube.APIServer{}, err
	}
	return kube.APIServer{
		Binary: p.Bin.Path("kube-apiserver"),
		Dir:    p.Dir("apiserver-" + m),
		CA:     ca,
		Etcd: kube.Etcd{Endpoints: p.Lab.APIServerEtcdEndpoints(m), CAFile: p.Lab.Etcd.CA.CertFile,
			CertFile: ec.CertFile, KeyFile: ec.KeyFile, Prefix: EtcdPrefix},
		Address:      p.Lab.Topo.Addr(m).String(),
		Port:         APIPort,
		NetNS:        p.Lab.Topo.NetNS(m),
		Hostname:     master.MachineName(p.Lab.Config().Prefix, m),
		Dial:         p.Dial,
		ReadyTimeout: 4 * time.Minute,
	}, nil
}

// Start starts both apiservers (those not running), in parallel: each
// takes tens of seconds on a loaded machine. They share one
// service-account key: a token the controller-manager of one master
// mints must be valid at the other's apiserver.
func (p *Plane) Start(ctx context.Context) error {
	first, err := p.APIServer(lab.MasterNames[0])
	if err != nil {
		return err
	}
	// All prepared before any starts: they share the admin certificate,
	// which each Prepare issues again, and a start's readiness check reads
	// it (seen: "tls: private key does not match public key" when the
	// second Prepare ran during the first's check).
	type prepared struct {
		a kube.APIServer
		f kube.Files
	}
	var todo []prepared
	for _, m := range lab.MasterNames {
		a, err := p.APIServer(m)
		if err != nil {
			return err
		}
		if m != lab.MasterNames[0] {
			if err := shareKey(first.Dir, a.Dir); err != nil {
				return err
			}
		}
		if _, ok := a.Running(); ok {
			continue
		}
		f, err := a.Prepare()
		if err != nil {
			return err
		}
		todo = append(todo, prepared{a, f})
	}
	errc := make(chan error, len(todo))
	for _, t := range todo {
		go func() {
			p.Log.Info("plane: kube-apiserver", "url", t.a.URL())
			errc <- t.a.StartPrepared(ctx, t.f)
		}()
	}
	var errs []error
	for range todo {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func shareKey(from, to string) error {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return fmt.Errorf("plane: %w", err)
	}
	for _, f := range []string{"sa.key", "sa.pub"} {
		b, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return fmt.Errorf("plane: service-account key: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o600); err != nil {
			return fmt.Errorf("plane: %w", err)
		}
	}
	return nil
}

// Component is component name on master m, in mode.
func (p *Plane) Component(m, name string, mode Mode) (kube.Component, error) {
	ca, err := p.CA()
	if err != nil {
		return kube.Component{}, err
	}
	a, err := p.APIServer(m)
	if err != nil {
		return kube.Component{}, err
	}
	server := a.URL()
	if mode.Balanced {
		server = BalancerURL
	}
	return kube.Component{
		Name: name, Binary: p.Bin.Path(name), Dir: p.Dir(m, name), CA: ca, Server: server,
		Address: a.Address, Port: componentPorts[name],
		LeaderElect: mode.LeaderElect, LeaseDuration: mode.Lease, RenewDeadline: mode.Renew, RetryPeriod: mode.Retry,
		ServiceAccountKey: filepath.Join(a.Dir, "sa.key"),
		StopTimeout:       mode.Profile.StopTimeout,
	}, nil
}

// HealthConfig is the [health] section of master m's supervisor: both
// components' /healthz on m's address, verified with the plane's CA (lab
// hook; the masters see the CA at its host path).
func (p *Plane) HealthConfig(m string) config.Health {
	var cs []kube.Component
	for _, name := range Units {
		cs = append(cs, kube.Component{Name: name, Address: p.Lab.Topo.Addr(m).String(), Port: componentPorts[name]})
	}
	return kube.Health(cs, p.Dir("ca", "ca.crt"), LabProbing)
}

// LabProbing is the threshold and grace of the lab's probes (3, 30 s); the
// lab's supervisors take the interval and timeout from their profile
// (lab.SupervisorConfig): fast 250 ms and 1.25 s (overlapping), default
// 2 s and 1 s. A frozen
// component is unhealthy after three failed probes in a row and restarted
// in place.
var LabProbing = kube.Probing{Interval: time.Second, Timeout: time.Second, Threshold: 3, Grace: 30 * time.Second}

// Units are the managed units, in the supervisor's start order.
var Units = []string{kube.ControllerManager, kube.Scheduler}

// WriteUnits writes both components' units for mode into n and reloads
// systemd (it starts nothing).
func (p *Plane) WriteUnits(ctx context.Context, n *master.Node, mode Mode) error {
	for _, name := range Units {
		c, err := p.Component(n.Name, name, mode)
		if err != nil {
			return err
		}
		f, err := c.Prepare()
		if err != nil {
			return err
		}
		if mode.Fence != "" {
			// install-kubeconfig (StartSupervisor) points it at the gate.
			if f.Kubeconfig, err = nodeKubeconfig(n, name, f.Kubeconfig); err != nil {
				return err
			}
		}
		u, err := c.Unit(f)
		if err != nil {
			return err
		}
		if err := n.WriteFile(master.UnitDir+"/"+name+".service", u, 0o644); err != nil {
			return err
		}
	}
	_, err := n.Systemctl(ctx, "daemon-reload")
	return err
}

// InstallUnits gives the master its own host name (masters booted from one
// image share the image's: the components' leader-election identities and
// the journal would not tell them apart) and writes the units
// kha-supervisor manages (lab hook at up).
func (p *Plane) InstallUnits(ctx context.Context, n *master.Node) error {
	if _, err := n.Exec(ctx, "hostname", master.MachineName(p.Lab.Config().Prefix, n.Name)); err != nil {
		return err
	}
	return p.WriteUnits(ctx, n, KhaMode(p.Lab.Config().Profile))
}

// Ready starts the node agents (those not running).
func (p *Plane) Ready(ctx context.Context) error {
	for _, w := range Workers {
		if err := p.startAgent(w); err != nil {
			return err
		}
	}
	return nil
}

// PodLog is worker w's agent's pod log (agent.ReadPodLog).
func (p *Plane) PodLog(w string) string { return filepath.Join(p.Dir("agent-"+w), "pods.jsonl") }

func (p *Plane) agentPID(w Worker) string { return filepath.Join(p.Dir("agent-"+w.Name), "agent.pid") }

func (p *Plane) startAgent(w Worker) error {
	if _, ok := proc.Running(p.agentPID(w)); ok {
		return nil
	}
	ca, err := p.CA()
	if err != nil {
		return err
	}
	dir := p.Dir("agent-" + w.Name)
	pair, err := ca.KubeClient("system:node:"+w.Name, "system:nodes")
	if err != nil {
		return err
	}
	var kcs []string
	// The rack's own master first, as a kubelet configured with its
	// nearest apiserver; the other as the fallback a load balancer gives.
	for _, m := range []string{w.Near, other(w.Near)} {
		a, err := p.APIServer(m)
		if err != nil {
			return err
		}
		kc := filepath.Join(dir, "via-"+m+".kubeconfig")
		if err := kube.WriteKubeconfig(kc, a.URL(), ca.CertFile, "system:node:"+w.Name, pair); err != nil {
			return err
		}
		kcs = append(kcs, kc)
	}
	argv := []string{"ip", "netns", "exec", p.Lab.Topo.NetNS(w.Name), p.Lab.SharedPath("bin", "kha-lab"), "node-agent",
		"--node", w.Name, "--kubeconfig", kcs[0], "--kubeconfig", kcs[1],
		"--pod-log", p.PodLog(w.Name), "--ignore-namespace", probe.DefaultNamespace, "--ignore-namespace", DrillNamespace}
	p.Log.Info("plane: node agent", "node", w.Name)
	_, err = proc.Start(proc.Spec{Argv: argv, PIDFile: p.agentPID(w), LogFile: filepath.Join(p.Lab.OutDir(), "agent-"+w.Name+".log")})
	return err
}

func other(m string) string {
	if m == lab.MasterNames[0] {
		return lab.MasterNames[1]
	}
	return lab.MasterNames[0]
}

// Down keeps the apiservers' audit and process logs in the lab's OutDir
// (the lab's Down ends the processes, which all run in its namespaces) and
// removes the plane's keys and certificates.
func (p *Plane) Down() error {
	var errs []error
	for _, m := range lab.MasterNames {
		src := p.Dir("apiserver-" + m)
		for _, f := range []string{"audit.log", "kube-apiserver.log"} {
			if b, err := os.ReadFile(filepath.Join(src, f)); err == nil {
				dst := filepath.Join(p.Lab.OutDir(), "kube", time.Now().UTC().Format("20060102T150405")+"-"+m+"-"+f)
				errs = append(errs, os.MkdirAll(filepath.Dir(dst), 0o755), os.WriteFile(dst, b, 0o644))
			}
		}
	}
	errs = append(errs, os.RemoveAll(p.Dir()))
	return errors.Join(errs...)
}
