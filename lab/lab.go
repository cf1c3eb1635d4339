// Package lab is the single-machine two-rack lab of the design brief
// (section 7): network namespaces for racks R1 and R2 and an etcd rack,
// three real etcd members, two systemd-nspawn masters running kha-supervisor
// with witness units, and the faults of the failure matrix.
//
// Everything a lab creates is named after its Prefix, lives below StateDir
// (and DataDir for etcd's data), and is removed by Down, also after a crash
// of an earlier run: processes by PID file (with start time), containers by
// their owner record, namespaces by name.
package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// DefaultPrefix names the demo lab's namespaces, containers and directories.
const DefaultPrefix = "khalab"

// Masters and etcd members of the lab.
var (
	MasterNames = []string{"m1", "m2"}
	EtcdNames   = []string{"e1", "e2", "e3"}
	// Witnesses stand in for the managed units, in start order.
	Witnesses = []master.Witness{{Unit: "kube-controller-manager"}, {Unit: "kube-scheduler"}}
)

// Config locates one lab.
type Config struct {
	Prefix     string // default DefaultPrefix
	StateDir   string // default /srv/PREFIX
	DataDir    string // etcd data; default /run/PREFIX/etcd (tmpfs: fsync latency of a shared disk is not what the lab measures)
	Binary     string // kha-lab binary copied into the lab; default: the running executable
	Supervisor string // kha-supervisor binary; default bin/kha-supervisor next to Binary, if present
	Deb        string // kha-supervisor .deb to install in the masters; empty: install the binary and packaging/ files
	Packaging  string // the source tree's packaging/ directory (used without a .deb)
	Profile    Profile
	// Etcd is the etcd timing by name (stock or tuned); empty: what the
	// running lab was brought up with, stock for a new one.
	Etcd string
	// EtcdLayout is where the members live (LayoutSeparate or
	// LayoutStacked, etcdlayout.go); empty: the running lab's, separate for
	// a new one.
	EtcdLayout string
	Log        *slog.Logger
}

// Lab is one lab instance. Its methods may be used from short-lived CLI
// processes: all state is on disk.
type Lab struct {
	cfg  Config
	Topo *topo.Topology
	Etcd *etcd.Cluster
	// EtcdTiming is the raft timing of the members.
	EtcdTiming EtcdTiming
	// layout is where the members live (etcdlayout.go).
	layout string
	log    *slog.Logger
	// plane, when set, is the real control plane (realplane.go).
	plane RealPlane
	// configEdit, when set, changes every supervisor's configuration
	// (realplane.go, WithConfigEdit).
	configEdit func(node string, c *config.Config)
}

// New resolves defaults; it creates nothing.
func New(cfg Config) (*Lab, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "/ ") || len(cfg.Prefix) > 20 {
		return nil, fmt.Errorf("lab: prefix %q: no slashes or spaces, at most 20 characters", cfg.Prefix)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join("/srv", cfg.Prefix)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join("/run", cfg.Prefix, "etcd")
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
		cfg.Binary = exe
	}
	if cfg.Supervisor == "" {
		cand := filepath.Join(filepath.Dir(cfg.Binary), "kha-supervisor")
		if _, err := os.Stat(cand); err == nil {
			cfg.Supervisor = cand
		}
	}
	if _, ok := config.Profiles[cfg.Profile.Name]; !ok && cfg.Profile.Name != "" {
		return nil, fmt.Errorf("lab: profile %q: not a shipped profile (%s)", cfg.Profile.Name, strings.Join(config.ProfileNames(), ", "))
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	l := &Lab{cfg: cfg, Topo: topo.Default(cfg.Prefix), log: cfg.Log}
	et, err := l.resolveEtcdTiming(cfg.Etcd)
	if err != nil {
		return nil, err
	}
	if l.cfg.Profile, err = l.resolveProfile(cfg.Profile); err != nil {
		return nil, err
	}
	l.EtcdTiming = et
	if l.layout, err = l.resolveEtcdLayout(cfg.EtcdLayout); err != nil {
		return nil, err
	}
	if l.layout == LayoutStacked {
		stack(l.Topo)
	}
	l.Etcd = &etcd.Cluster{
		Topo:     l.Topo,
		Members:  EtcdNames,
		Command:  []string{l.SharedPath("bin", "kha-lab"), "etcd-member"},
		RunDir:   l.path("run"),
		DataDir:  cfg.DataDir,
		LogDir:   l.OutDir(),
		Observer: "obs",
		// Stock etcd timing unless asked otherwise: the fast profile must
		// survive an etcd leader loss with it (issue 11.2).
		HeartbeatMS: et.HeartbeatMS,
		ElectionMS:  et.ElectionMS,
	}
	return l, nil
}

// Config is the resolved configuration.
func (l *Lab) Config() Config { return l.cfg }

func (l *Lab) path(p ...string) string {
	return filepath.Join(append([]string{l.cfg.StateDir}, p...)...)
}

// SharedPath is a path in the directory bound at /lab inside the masters.
func (l *Lab) SharedPath(p ...string) string { return l.path(append([]string{"shared"}, p...)...) }

// OutDir holds logs and reports; Down keeps it.
func (l *Lab) OutDir() string { return l.path("out") }

// FaultsDir is the host side of /lab/faults (the witnesses' fault files).
func (l *Lab) FaultsDir() string { return l.SharedPath("faults") }

// ClearFaults removes every witness fault file.
func (l *Lab) ClearFaults() error {
	if err := os.RemoveAll(l.FaultsDir()); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.MkdirAll(l.FaultsDir(), 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// WitnessDir is the host side of /lab/witness.
func (l *Lab) WitnessDir() string { return l.SharedPath("witness") }

func (l *Lab) holdPID() string   { return l.path("run", "masters.pid") }
func (l *Lab) holdState() string { return l.path("run", "masters.json") }
func (l *Lab) pkiDir() string    { return l.path("pki") }

// Up builds whatever is missing and leaves what runs alone.
func (l *Lab) Up(ctx context.Context) error {
	start := time.Now()
	if err := l.checkEtcdLayout(); err != nil {
		return err
	}
	if err := checkHostPath(); err != nil {
		return err
	}
	if _, err := nspawn.CleanupStale(l.cfg.Prefix + "-"); err != nil {
		return fmt.Errorf("lab: clean up stale containers: %w", err)
	}
	if _, ok := proc.Running(l.holdPID()); !ok {
		if err := l.recordOwner(os.Getpid()); err != nil {
			return err
		}
	}
	for _, d := range []string{l.path("run"), l.OutDir(), l.SharedPath("bin"), l.SharedPath("pki"), l.WitnessDir(), l.cfg.DataDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	if err := l.ClearFaults(); err != nil {
		return err
	}
	if err := l.saveEtcdTiming(); err != nil {
		return err
	}
	if err := l.saveProfile(); err != nil {
		return err
	}
	if err := l.savePlane(); err != nil { // real plane (realplane.go)
		return err
	}
	if err := l.saveEtcdLayout(); err != nil {
		return err
	}
	if err := l.installBinaries(); err != nil {
		return err
	}
	if err := l.ensurePKI(); err != nil {
		return err
	}
	l.log.Info("lab: network")
	if err := l.Topo.Up(ctx); err != nil {
		return err
	}
	l.log.Info("lab: etcd members")
	ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.Etcd.Up(ectx); err != nil {
		return err
	}
	if l.plane != nil { // real plane (realplane.go): the apiservers
		if err := l.plane.Start(ctx); err != nil {
			return err
		}
	}
	l.log.Info("lab: masters")
	nodes, err := l.ensureMasters(ctx)
	if err != nil {
		return err
	}
	for _, name := range MasterNames {
		if err := l.setupMaster(ctx, nodes[name]); err != nil {
			return err
		}
	}
	if l.plane != nil { // real plane (realplane.go): the node agents
		if err := l.plane.Ready(ctx); err != nil {
			return err
		}
	}
	l.log.Info("lab is up", "etcd", l.EtcdTiming.String(), "etcd_layout", l.layout, "prefix", l.cfg.Prefix, "state", l.cfg.StateDir, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// installBinaries copies kha-lab (and kha-supervisor, with the kha-guard
// beside it) into the shared directory: the masters run them from /lab/bin,
// and etcd members run the copy so that rebuilding the source tree does not
// change a running lab.
func (l *Lab) installBinaries() error {
	if err := copyFile(l.cfg.Binary, l.SharedPath("bin", "kha-lab"), 0o755); err != nil {
		return err
	}
	for _, w := range Witnesses {
		// A fresh link every time: copyFile may have put a new inode in
		// place; a running witness keeps its old one.
		dst := l.SharedPath("bin", w.Unit)
		if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("lab: %w", err)
		}
		if err := os.Link(l.SharedPath("bin", "kha-lab"), dst); err != nil {
			return fmt.Errorf("lab: witness binary: %w", err)
		}
	}
	if l.cfg.Supervisor != "" {
		if err := copyFile(l.cfg.Supervisor, l.SharedPath("bin", "kha-supervisor"), 0o755); err != nil {
			return err
		}
		guard := filepath.Join(filepath.Dir(l.cfg.Supervisor), guardName)
		switch _, err := os.Stat(guard); {
		case err == nil:
			if err := copyFile(guard, l.SharedPath("bin", guardName), 0o755); err != nil {
				return err
			}
		case errors.Is(err, os.ErrNotExist):
			// A kha-supervisor from before kha-guard writes drop-ins that
			// run its own `guard` subcommand; a newer one without its
			// kha-guard would leave the units unable to start.
			if err := os.Remove(l.SharedPath("bin", guardName)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("lab: %w", err)
			}
			l.log.Warn("lab: no kha-guard beside kha-supervisor; the managed units start only if its drop-ins run `kha-supervisor guard`", "supervisor", l.cfg.Supervisor)
		default:
			return fmt.Errorf("lab: %w", err)
		}
	}
	return nil
}

// ensurePKI creates the lab's CA once and gives every master a client
// certificate (CN = its name) in /lab/pki.
func (l *Lab) ensurePKI() error {
	var ca *pki.CA
	var err error
	if _, serr := os.Stat(filepath.Join(l.pkiDir(), "ca.key")); serr == nil {
		ca, err = pki.LoadCA(l.pkiDir())
	} else {
		ca, err = pki.NewCA(l.pkiDir())
	}
	if err != nil {
		return err
	}
	l.Etcd.CA = ca
	if err := copyFile(ca.CertFile, l.SharedPath("pki", "ca.crt"), 0o644); err != nil {
		return err
	}
	for _, m := range MasterNames {
		p, err := ca.Client(m)
		if err != nil {
			return err
		}
		if err := copyFile(p.CertFile, l.SharedPath("pki", m+".crt"), 0o644); err != nil {
			return err
		}
		if err := copyFile(p.KeyFile, l.SharedPath("pki", m+".key"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Open attaches to a lab that is up (for commands other than up).
func (l *Lab) Open() error {
	ca, err := pki.LoadCA(l.pkiDir())
	if err != nil {
		return fmt.Errorf("lab: not up (%s): %w", l.cfg.StateDir, err)
	}
	l.Etcd.CA = ca
	return nil
}

// ensureMasters starts the holder process unless it runs with live masters.
func (l *Lab) ensureMasters(ctx context.Context) (map[string]*master.Node, error) {
	if _, ok := proc.Running(l.holdPID()); ok {
		if nodes, err := master.Load(l.holdState()); err == nil {
			return nodes, nil
		}
		l.log.Warn("lab: holder runs without live masters; restarting it")
		if err := proc.Stop(ctx, l.holdPID(), 90*time.Second); err != nil {
			return nil, err
		}
	}
	// Fresh masters: the witness logs of earlier masters would only
	// confuse the checker.
	if err := os.RemoveAll(l.WitnessDir()); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if err := os.MkdirAll(l.WitnessDir(), 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	_ = os.Remove(l.holdState())
	argv := []string{l.SharedPath("bin", "kha-lab"), "hold-masters", "--prefix", l.cfg.Prefix, "--state", l.cfg.StateDir}
	if _, err := proc.Start(proc.Spec{Argv: argv, PIDFile: l.holdPID(), LogFile: filepath.Join(l.OutDir(), "masters.log")}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(4 * time.Minute)
	for {
		if nodes, err := master.Load(l.holdState()); err == nil {
			// From now on the holder keeps the lab alive.
			if id, ok := proc.Running(l.holdPID()); ok {
				if err := l.recordOwner(id.PID); err != nil {
					return nil, err
				}
			}
			return nodes, nil
		}
		if _, ok := proc.Running(l.holdPID()); !ok {
			return nil, fmt.Errorf("lab: the masters' holder exited; see %s", filepath.Join(l.OutDir(), "masters.log"))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("lab: masters did not boot in time; see %s", filepath.Join(l.OutDir(), "masters.log"))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// HoldMasters is the holder process's body (`kha-lab hold-masters`).
func (l *Lab) HoldMasters(ctx context.Context) error {
	netns := map[string]string{}
	for _, m := range MasterNames {
		netns[m] = l.Topo.NetNSPath(m)
	}
	return master.Hold(ctx, master.HoldOptions{
		Prefix:    l.cfg.Prefix,
		NetNS:     netns,
		Shared:    l.SharedPath(),
		StateFile: l.holdState(),
		LogDir:    l.OutDir(),
		Log:       l.log,
		Binds:     l.planeBinds(), // real plane (realplane.go)
	})
}

// Masters attaches to the running masters.
func (l *Lab) Masters() (map[string]*master.Node, error) { return master.Load(l.holdState()) }

// Master attaches to one running master.
func (l *Lab) Master(name string) (*master.Node, error) {
	nodes, err := l.Masters()
	if err != nil {
		return nil, err
	}
	n, ok := nodes[name]
	if !ok {
		return nil, fmt.Errorf("lab: no master %q", name)
	}
	return n, nil
}

// Witness reads the witness logs (call Refresh on the result to catch up).
func (l *Lab) Witness() *witness.Log { return witness.NewLog(l.WitnessDir()) }

// setupMaster installs the witness units and, when available, the
// supervisor.
func (l *Lab) setupMaster(ctx context.Context, n *master.Node) error {
	if l.plane != nil { // real plane (realplane.go): the real units
		if err := l.plane.InstallUnits(ctx, n); err != nil {
			return err
		}
		return l.installSupervisor(ctx, n)
	}
	if err := n.InstallWitnesses(ctx, Witnesses); err != nil {
		return err
	}
	return l.installSupervisor(ctx, n)
}

// Down removes everything the lab made except OutDir (logs, reports) and the
// witness logs, also what a crashed run left behind.
func (l *Lab) Down(ctx context.Context) error {
	var errs []error
	if err := proc.Stop(ctx, l.holdPID(), 90*time.Second); err != nil {
		errs = append(errs, err)
	}
	if _, err := nspawn.CleanupStale(l.cfg.Prefix + "-"); err != nil {
		errs = append(errs, err)
	}
	if err := l.Etcd.Down(ctx); err != nil {
		errs = append(errs, err)
	}
	// Anything else still inside the lab's namespaces is the lab's by
	// construction (only the lab puts processes there): end it by PID.
	nss, err := topo.Namespaces(l.cfg.Prefix)
	errs = append(errs, err)
	for _, ns := range nss {
		for _, pid := range netnsPIDs(ctx, ns) {
			if id, err := proc.Identify(pid); err == nil {
				l.log.Warn("lab: ending leftover process in namespace", "netns", ns, "pid", pid)
				errs = append(errs, proc.KillID(ctx, id))
			}
		}
	}
	errs = append(errs, l.Topo.Down(ctx))
	if err := os.Remove(l.ownerFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, d := range []string{l.path("run"), l.pkiDir(), l.SharedPath("bin"), l.SharedPath("pki"), l.SharedPath("dist"), l.FaultsDir(), l.cfg.DataDir} {
		errs = append(errs, os.RemoveAll(d))
	}
	// The default data directory's parent (/run/PREFIX) is the lab's too.
	if parent := filepath.Dir(l.cfg.DataDir); parent == filepath.Join("/run", l.cfg.Prefix) {
		errs = append(errs, os.RemoveAll(parent))
	}
	return errors.Join(errs...)
}

// netnsPIDs lists processes whose network namespace is ns.
func netnsPIDs(ctx context.Context, ns string) []int {
	out, err := exec.CommandContext(ctx, "ip", "netns", "pids", ns).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer in.Close()
	if old, err := os.ReadFile(dst); err == nil {
		cur, err := io.ReadAll(in)
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if bytes.Equal(old, cur) {
			return nil
		}
		if _, err := in.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
	}
	// Write aside and rename: a running binary (an etcd member) keeps its
	// old inode, and a reader never sees half a file.
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	_, cerr := io.Copy(out, in)
	if err := errors.Join(cerr, out.Close(), os.Chmod(tmp, mode)); err != nil {
		return fmt.Errorf("lab: copy %s: %w", src, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}
