package plane

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Mode is how the components are run: as kha-supervisor's managed units
// (with a supervisor timing profile) or on both masters with client-go
// leader election (the comparison).
type Mode struct {
	Name        string
	LeaderElect bool
	// Lease, Renew and Retry: leader election timing; zero is client-go's
	// defaults (15 s / 10 s / 2 s).
	Lease, Renew, Retry time.Duration
	Profile             lab.Profile // kha modes only
	// Fence is api_fence.mode of the kha modes: "" (off), "gate" or
	// "token" (fence.go).
	Fence string
	// PolicyOnly, in token mode, leaves the token webhook unregistered:
	// the policy alone judges, from each apiserver's cache (the design
	// before the webhook became the authority; scenario 61 measures what
	// the webhook closes).
	PolicyOnly bool
	// EtcdFence turns etcd_fence on (etcdauth.go): the plane's etcd gets
	// auth, and each takeover revokes the old master's apiserver's role.
	EtcdFence bool
	// Balanced points the components' kubeconfig at the master's local
	// balancer (both apiservers behind it) instead of its own apiserver:
	// the layout of scenario 48, set by the scenario, not by the mode's
	// name.
	Balanced bool
}

// key tells apart what needs different units: the mode and its layout.
func (m Mode) key() string {
	if m.Balanced {
		return m.Name + "+lb"
	}
	return m.Name
}

// KhaMode runs the components under kha-supervisor with profile p.
func KhaMode(p lab.Profile) Mode { return Mode{Name: "kha-" + p.Name, Profile: p} }

// WithEtcdFence is m with [etcd_fence] on, its name marked "-etcd".
func WithEtcdFence(m Mode) Mode {
	m.Name, m.EtcdFence = m.Name+"-etcd", true
	return m
}

// Modes of the side-by-side, by name.
var Modes = map[string]Mode{
	"kha-fast":          KhaMode(lab.Fast),
	"kha-default":       KhaMode(lab.Default),
	"kha-fast-kill":     KhaMode(lab.FastKill),
	"kha-fast-token":    FencedMode(lab.Fast, FenceToken),
	"kha-fast-gate":     FencedMode(lab.Fast, FenceGate),
	"kha-default-token": FencedMode(lab.Default, FenceToken),
	"kha-fast-token-policy": func() Mode {
		m := FencedMode(lab.Fast, FenceToken)
		m.Name, m.PolicyOnly = m.Name+"-policy", true
		return m
	}(),
	"kha-fast-etcd":      WithEtcdFence(KhaMode(lab.Fast)),
	"kha-fast-kill-etcd": WithEtcdFence(KhaMode(lab.FastKill)),
	"le-defaults":        {Name: "le-defaults", LeaderElect: true},
	"le-tuned":           {Name: "le-tuned", LeaderElect: true, Lease: 5 * time.Second, Renew: 3 * time.Second, Retry: time.Second},
}

// ParseModes parses a comma list of mode names.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		m, ok := Modes[n]
		var err error
		switch {
		case !ok && strings.HasPrefix(n, "le-"):
			m, ok, err = leaderElectTiming(n)
		case !ok && strings.Contains(n, "-ttl"):
			m, ok, err = khaTTL(n)
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			names := make([]string, 0, len(Modes))
			for k := range Modes {
				names = append(names, k)
			}
			slices.Sort(names)
			return nil, fmt.Errorf("mode %q: want one of %s, or le-L-R-P (leader election with lease L, renew deadline R and retry period P, in whole seconds), or kha-PROFILE-ttlD (a shipped profile with lease.ttl D, e.g. kha-fast-kill-ttl5s)", n, strings.Join(names, ", "))
		}
		out = append(out, m)
	}
	return out, nil
}

// khaTTL parses kha-PROFILE-ttlD: the shipped profile PROFILE with its
// lease.ttl set to D (a Go duration, whole seconds; lab.SupervisorConfig
// writes it), to measure what a longer lease trades (issue 21: riding a
// flap against the rack cut's floor). The supervisor's own check-config
// judges the window at install. ok is false when name is not of that form.
func khaTTL(name string) (Mode, bool, error) {
	base, d, found := strings.Cut(name, "-ttl")
	base = strings.TrimPrefix(base, "kha-")
	if !found || !strings.HasPrefix(name, "kha-") {
		return Mode{}, false, nil
	}
	p, err := lab.ProfileByName(base)
	if err != nil {
		return Mode{}, false, fmt.Errorf("mode %q: %w", name, err)
	}
	ttl, err := time.ParseDuration(d)
	if err != nil || ttl <= p.Renew || ttl%time.Second != 0 {
		return Mode{}, false, fmt.Errorf("mode %q: the TTL after -ttl must be a whole number of seconds above the profile's renew interval %s, such as 5s (etcd grants lease TTLs in seconds)", name, p.Renew)
	}
	p.TTL = ttl
	return Mode{Name: name, Profile: p}, true, nil
}

// leaderElectTiming parses le-L-R-P: leader election with lease duration
// L, renew deadline R and retry period P seconds, under client-go's own
// checks (L > R > 1.2 P: leaderelection.NewLeaderElector refuses the rest).
// ok is false when name is not of that form.
func leaderElectTiming(name string) (Mode, bool, error) {
	var l, r, p int
	if n, err := fmt.Sscanf(name, "le-%d-%d-%d", &l, &r, &p); err != nil || n != 3 || fmt.Sprintf("le-%d-%d-%d", l, r, p) != name {
		return Mode{}, false, nil
	}
	if p <= 0 || float64(r) <= 1.2*float64(p) || l <= r {
		return Mode{}, false, fmt.Errorf("mode %q: leader election needs lease > renew deadline > 1.2 x retry period, all above 0", name)
	}
	sec := func(v int) time.Duration { return time.Duration(v) * time.Second }
	return Mode{Name: name, LeaderElect: true, Lease: sec(l), Renew: sec(r), Retry: sec(p)}, true, nil
}
