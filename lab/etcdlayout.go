package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

// Where the etcd members live (`kha-lab up --etcd-layout`).
const (
	// LayoutSeparate: the three members in a rack of their own (the
	// design brief's topology, the default); every apiserver talks to all
	// three.
	LayoutSeparate = "separate"
	// LayoutStacked: kubeadm's stacked control plane over two racks and a
	// third site. e1 lives in m1's rack and e2 in m2's, each the only
	// member its master's apiserver talks to (kubeadm's
	// --etcd-servers=https://127.0.0.1:2379); e3 stays alone in the etcd
	// rack, the tie-breaker. A rack cut takes a master away together with
	// its member, which forwards its apiserver's proposals to a raft
	// leader it can no longer reach (or, as the raft leader, appends them
	// until CheckQuorum makes it step down): issue 22's stacked variant.
	// The supervisors still list all three members, as an operator's
	// config does. The real plane only: the stand-ins have no apiserver.
	LayoutStacked = "stacked"
)

// stackedMembers are the members a stacked layout puts beside a master:
// member -> (master, its address in the master's rack).
var stackedMembers = map[string]struct{ master, addr string }{
	"e1": {"m1", "10.77.1.21"},
	"e2": {"m2", "10.77.2.22"},
}

func (l *Lab) etcdLayoutFile() string { return l.path("run", "etcd-layout") }

// resolveEtcdLayout picks the layout: the explicit choice (refused when a
// running lab has the other), else the running lab's, else separate.
func (l *Lab) resolveEtcdLayout(explicit string) (string, error) {
	if explicit != "" && explicit != LayoutSeparate && explicit != LayoutStacked {
		return "", fmt.Errorf("lab: unknown etcd layout %q (%s or %s)", explicit, LayoutSeparate, LayoutStacked)
	}
	if _, err := os.Stat(l.etcdLayoutFile()); errors.Is(err, os.ErrNotExist) {
		// A lab brought up before the layouts existed has its timing
		// saved and no layout: it is separate, and stacking it in place
		// would re-address running members.
		if _, err := os.Stat(l.etcdTimingFile()); err == nil {
			if explicit != "" && explicit != LayoutSeparate {
				return "", fmt.Errorf("lab: it runs etcd layout %q; --etcd-layout %s needs `kha-lab down` first", LayoutSeparate, explicit)
			}
			return LayoutSeparate, nil
		}
	}
	name, err := savedChoice(l.etcdLayoutFile(), explicit, "etcd layout", "--etcd-layout")
	if err != nil {
		return "", err
	}
	if name == "" {
		return LayoutSeparate, nil
	}
	return name, nil
}

// checkEtcdLayout refuses, before up creates anything, a layout the plane
// cannot run.
func (l *Lab) checkEtcdLayout() error {
	if l.layout == LayoutStacked && l.plane == nil {
		return fmt.Errorf("lab: --etcd-layout %s needs --plane real (the stand-ins have no apiserver to stack a member under)", LayoutStacked)
	}
	return nil
}

func (l *Lab) saveEtcdLayout() error {
	if err := l.checkEtcdLayout(); err != nil {
		return err
	}
	if err := os.WriteFile(l.etcdLayoutFile(), []byte(l.layout+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// stack moves the stacked members into their masters' racks.
func stack(t *topo.Topology) {
	for i, h := range t.Hosts {
		if s, ok := stackedMembers[h.Name]; ok {
			m, _ := t.Host(s.master)
			t.Hosts[i].Rack, t.Hosts[i].Addr = m.Rack, netip.MustParseAddr(s.addr)
		}
	}
}

// EtcdLayout is where the lab's etcd members live (LayoutSeparate or
// LayoutStacked).
func (l *Lab) EtcdLayout() string { return l.layout }

// StackedMember is the etcd member beside master m in the stacked layout
// ("" in the separate layout).
func (l *Lab) StackedMember(m string) string {
	if l.layout != LayoutStacked {
		return ""
	}
	for e, s := range stackedMembers {
		if s.master == m {
			return e
		}
	}
	return ""
}

// APIServerEtcdEndpoints are the etcd endpoints master m's apiserver is
// given: every member, or in the stacked layout its own member only.
func (l *Lab) APIServerEtcdEndpoints(m string) []string {
	if e := l.StackedMember(m); e != "" {
		return []string{l.Etcd.ClientURL(e)}
	}
	return l.Etcd.Endpoints()
}
