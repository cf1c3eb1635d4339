package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Paths of the supervisor inside a master, as the package installs them.
const (
	SupervisorUnit   = layout.SupervisorUnit
	SupervisorConfig = layout.ConfigPath
	supervisorBinary = layout.Binary
	guardBinary      = layout.Guard
	guardName        = "kha-guard" // its file name, beside kha-supervisor in a build
	supervisorLabDir = "/etc/systemd/system/kha-supervisor.service.d"
	// Cluster is the election group the lab's supervisors compete in.
	Cluster = "lab"
	// EtcdPrefix is the supervisors' etcd key prefix (the default).
	EtcdPrefix = "/kha-supervisor"
)

// SupervisorConfig is master node's configuration: the lab profile's
// shipped profile (config.Profiles, applied by UseProfile: the one
// definition of its timings) with the lab's own cooldown, every etcd member
// over TLS with the master's own client certificate, the witnesses as the
// managed units and debug logs. Scenarios change a copy of it (hooks, a
// takeover delay) and write it with WriteSupervisorConfig.
func (l *Lab) SupervisorConfig(node string) config.Config {
	p := l.cfg.Profile
	c := config.Default()
	if err := c.UseProfile(p.Name); err != nil {
		// New refuses a profile config.Profiles does not have.
		panic(fmt.Sprintf("lab: profile %q: %v", p.Name, err))
	}
	if p.TTL != 0 && p.TTL != c.Lease.TTL {
		// A lab profile with a lease of its own (plane mode
		// kha-PROFILE-ttlD): the file then says the TTL is not the
		// shipped profile's.
		c.Lease.TTL = p.TTL
		c.FromProfile = slices.DeleteFunc(slices.Clone(c.FromProfile), func(k string) bool { return k == "lease.ttl" })
	}
	c.Node, c.Cluster = node, Cluster
	c.Etcd.Endpoints = l.Etcd.Endpoints()
	c.Etcd.Prefix = EtcdPrefix
	c.Etcd.CA = "/lab/pki/ca.crt"
	c.Etcd.Cert = "/lab/pki/" + node + ".crt"
	c.Etcd.Key = "/lab/pki/" + node + ".key"
	c.Units.Managed = nil
	for _, w := range Witnesses {
		c.Units.Managed = append(c.Units.Managed, w.Service())
	}
	c.Units.Cooldown = p.Cooldown
	c.Log.Level = "debug"
	c.Path = "kha-lab (profile " + p.Name + ")"
	if h, ok := l.plane.(HealthProber); ok {
		// The probes' timing is the profile's: how fast a hung component
		// is found is part of what a profile is measured for.
		interval, timeout := c.Health.Interval, c.Health.Timeout
		c.Health = h.HealthConfig(node)
		c.Health.Interval, c.Health.Timeout = interval, timeout
	}
	if l.configEdit != nil {
		l.configEdit(node, &c)
	}
	return c
}

// sameFile reports whether a and b hold the same bytes, or are both absent.
func sameFile(a, b string) bool {
	x, errA := os.ReadFile(a)
	y, errB := os.ReadFile(b)
	if errA != nil || errB != nil {
		return errors.Is(errA, os.ErrNotExist) && errors.Is(errB, os.ErrNotExist)
	}
	return bytes.Equal(x, y)
}

// ConfigText is c as the TOML file a master reads (config.Describe: every
// key, then the fence window as comments).
func ConfigText(c config.Config) []byte {
	var b bytes.Buffer
	if err := c.Describe(&b); err != nil {
		panic(fmt.Sprintf("lab: describe a configuration into memory: %v", err)) // a bytes.Buffer does not fail
	}
	return b.Bytes()
}

// SupervisorConfigFor renders master node's configuration (SupervisorConfig)
// as the file it reads.
func (l *Lab) SupervisorConfigFor(node string) []byte { return ConfigText(l.SupervisorConfig(node)) }

// watchdogDropin shortens the shipped unit's watchdog for short TTLs, as the
// unit file's own comment asks: the frozen-supervisor path (SIGSTOP) must
// end within TTL*(1-rho) - S_max - slack - renew - request timeout.
func (l *Lab) watchdogDropin() []byte {
	p := l.cfg.Profile
	// The shipped profile's own WatchdogSec (what install-dropins writes):
	// default 2s, fast 1s, fast-kill 500ms.
	wd := config.Profiles[p.Name].Watchdog
	abort := wd / 2
	return fmt.Appendf(nil, "# Written by kha-lab: watchdog for the %s profile (TTL %s).\n[Service]\nWatchdogSec=%dms\nTimeoutAbortSec=%dms\n",
		p.Name, p.TTL, wd.Milliseconds(), abort.Milliseconds())
}

// SupervisorAvailable reports whether the lab has something to install.
func (l *Lab) SupervisorAvailable() bool {
	return l.cfg.Deb != "" || l.cfg.Supervisor != ""
}

// installSupervisor installs kha-supervisor in a master the way an operator
// would: the .deb when one is given, otherwise the same files the package
// holds (binary, unit) from the build; then the configuration, the managed
// units' drop-ins (install-dropins) and a start. Idempotent: an installed,
// running supervisor with the same configuration is left alone.
func (l *Lab) installSupervisor(ctx context.Context, n *master.Node) error {
	if !l.SupervisorAvailable() {
		l.log.Warn("lab: no kha-supervisor binary or package; masters run without a supervisor", "master", n.Name)
		return nil
	}
	if st, _ := n.ActiveState(ctx, SupervisorUnit); st == "active" && l.cfg.Deb == "" {
		cur, err1 := os.ReadFile(filepath.Join(n.Root(), SupervisorConfig))
		bin, err2 := os.ReadFile(filepath.Join(n.Root(), supervisorBinary))
		want, err3 := os.ReadFile(l.SharedPath("bin", "kha-supervisor"))
		sameGuard := sameFile(filepath.Join(n.Root(), guardBinary), l.SharedPath("bin", guardName))
		if err1 == nil && err2 == nil && err3 == nil && bytes.Equal(cur, l.SupervisorConfigFor(n.Name)) && bytes.Equal(bin, want) && sameGuard {
			return nil
		}
	}
	if l.cfg.Deb != "" {
		dst := l.SharedPath("dist", filepath.Base(l.cfg.Deb))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if err := copyFile(l.cfg.Deb, dst, 0o644); err != nil {
			return err
		}
		if out, err := n.Exec(ctx, "dpkg", "-i", master.LabDir+"/dist/"+filepath.Base(l.cfg.Deb)); err != nil {
			return fmt.Errorf("lab: install package in %s: %w: %s", n.Name, err, out)
		}
	} else {
		unit, err := os.ReadFile(filepath.Join(l.cfg.Packaging, "systemd", SupervisorUnit))
		if err != nil {
			return fmt.Errorf("lab: the supervisor's unit file (give --packaging or --deb): %w", err)
		}
		bin, err := os.ReadFile(l.SharedPath("bin", "kha-supervisor"))
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		if err := n.ReplaceFile(supervisorBinary, bin, 0o755); err != nil {
			return err
		}
		switch guard, err := os.ReadFile(l.SharedPath("bin", guardName)); {
		case err == nil:
			if err := n.ReplaceFile(guardBinary, guard, 0o755); err != nil {
				return err
			}
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("lab: %w", err)
		}
		if err := n.WriteFile("/usr/lib/systemd/system/"+SupervisorUnit, unit, 0o644); err != nil {
			return err
		}
	}
	if err := n.WriteFile(SupervisorConfig, l.SupervisorConfigFor(n.Name), 0o600); err != nil {
		return err
	}
	if err := n.WriteFile(supervisorLabDir+"/90-lab-watchdog.conf", l.watchdogDropin(), 0o644); err != nil {
		return err
	}
	if out, err := n.Exec(ctx, supervisorBinary, "install-dropins", "-c", SupervisorConfig); err != nil {
		return fmt.Errorf("lab: install-dropins in %s: %w: %s", n.Name, err, out)
	}
	if err := l.guardInstalled(n); err != nil {
		return err
	}
	// check-config reads the installed units (the drop-ins just written), so
	// it runs after install-dropins, as an operator's would.
	if out, err := n.Exec(ctx, supervisorBinary, "check-config", "-c", SupervisorConfig); err != nil {
		return fmt.Errorf("lab: configuration of %s refused: %w: %s", n.Name, err, out)
	}
	if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	if _, err := n.Systemctl(ctx, "restart", SupervisorUnit); err != nil {
		return fmt.Errorf("lab: start the supervisor in %s: %w", n.Name, err)
	}
	return nil
}

// guardInstalled checks that the program each managed unit's drop-in runs
// as its guard exists in n: without it no unit would ever start, and the
// lab would only time out waiting for a leader's units.
func (l *Lab) guardInstalled(n *master.Node) error {
	for _, u := range l.SupervisorConfig(n.Name).Units.Managed {
		b, err := os.ReadFile(filepath.Join(n.Root(), dropin.Path(master.UnitDir, u)))
		if err != nil {
			return fmt.Errorf("lab: %s: %w", n.Name, err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			cmd, ok := strings.CutPrefix(line, "ExecStartPre=+")
			if !ok {
				continue
			}
			prog, _, _ := strings.Cut(cmd, " ")
			if _, err := os.Stat(filepath.Join(n.Root(), prog)); err != nil {
				return fmt.Errorf("lab: %s: %s's guard %s is not installed (build cmd/kha-guard beside kha-supervisor: make build does): %w", n.Name, u, prog, err)
			}
		}
	}
	return nil
}

// StartSupervisors starts the supervisor on every master where it is not
// running.
func (l *Lab) StartSupervisors(ctx context.Context) error {
	nodes, err := l.Masters()
	if err != nil {
		return err
	}
	for _, name := range MasterNames {
		if _, err := nodes[name].Systemctl(ctx, "start", SupervisorUnit); err != nil {
			return err
		}
	}
	return nil
}
