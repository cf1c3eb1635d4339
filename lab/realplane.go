package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/lab/etcd"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Planes a lab can run: the witnesses standing in for the managed units
// (the default, the quick CI subset) or the real Kubernetes components.
const (
	PlaneWitness = "witness"
	PlaneReal    = "real"
)

// RealPlane is the real control plane (lab/kube/plane implements it). The
// lab calls it at these points only, so the witness lab is unchanged
// without one.
type RealPlane interface {
	// Adjust changes the plan before anything exists (worker hosts, etcd
	// timing).
	Adjust(t *topo.Topology, e *etcd.Cluster)
	// Binds are bound into every master (the binaries, the certificates).
	Binds() []nspawn.Bind
	// Start runs after etcd and before the masters (the apiservers).
	Start(ctx context.Context) error
	// InstallUnits replaces the witness units in a master.
	InstallUnits(ctx context.Context, n *master.Node) error
	// Ready runs after the masters and their supervisors (node agents).
	Ready(ctx context.Context) error
}

// HealthProber is a RealPlane whose units answer health probes: its
// HealthConfig is the [health] section of master node's supervisor. The
// witnesses serve none, so the witness lab has no probes.
type HealthProber interface {
	HealthConfig(node string) config.Health
}

// UsePlane makes l run the real control plane.
func (l *Lab) UsePlane(p RealPlane) {
	l.plane = p
	p.Adjust(l.Topo, l.Etcd)
}

func (l *Lab) planeFile() string { return l.path("run", "plane") }

// SavedPlane is the plane the running lab was brought up with
// (PlaneWitness when none was recorded).
func (l *Lab) SavedPlane() (string, error) {
	b, err := os.ReadFile(l.planeFile())
	if errors.Is(err, os.ErrNotExist) {
		return PlaneWitness, nil
	}
	if err != nil {
		return "", fmt.Errorf("lab: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// savePlane records the plane at up; asking another of a running lab is
// refused (its masters were booted for the other).
func (l *Lab) savePlane() error {
	want := PlaneWitness
	if l.plane != nil {
		want = PlaneReal
	}
	if _, err := os.Stat(l.planeFile()); err == nil {
		cur, err := l.SavedPlane()
		if err != nil {
			return err
		}
		if cur != want {
			return fmt.Errorf("lab: %s runs the %s plane; --plane %s needs `kha-lab down` first", l.cfg.Prefix, cur, want)
		}
		return nil
	}
	return os.WriteFile(l.planeFile(), []byte(want+"\n"), 0o644)
}

func (l *Lab) planeBinds() []nspawn.Bind {
	if l.plane == nil {
		return nil
	}
	return l.plane.Binds()
}

// WithProfile is l running the supervisors with another timing profile
// (the side-by-side switches between kha-fast and kha-default).
func (l *Lab) WithProfile(p Profile) *Lab {
	c := *l
	c.cfg.Profile = p
	return &c
}

// InstallSupervisor (re)installs and restarts the supervisor in n with l's
// profile, as up does.
func (l *Lab) InstallSupervisor(ctx context.Context, n *master.Node) error {
	return l.installSupervisor(ctx, n)
}

// WithConfigEdit is l with edit applied to each supervisor's configuration
// (the real plane's [api_fence] and [etcd_fence] sections); edits compose.
func (l *Lab) WithConfigEdit(edit func(node string, c *config.Config)) *Lab {
	c := *l
	if prev := l.configEdit; prev != nil {
		c.configEdit = func(node string, cfg *config.Config) { prev(node, cfg); edit(node, cfg) }
	} else {
		c.configEdit = edit
	}
	return &c
}
