// Package topo builds the lab's network: one network namespace per host, one
// router namespace joining the racks, and faults made of blackhole routes.
//
// Every namespace is named Prefix + "-" + host, so two labs (a demo and a
// test run) can exist side by side, and cleanup after a crash finds exactly
// what a lab made by its name prefix. Addresses live in 10.77.0.0/16 inside
// these namespaces only: the host's root namespace never gets a route to them.
package topo

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// RouterName is the host name of the namespace that routes between racks.
const RouterName = "router"

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// Rack is one subnet behind one bridge in the router namespace.
type Rack struct {
	Name    string
	Subnet  netip.Prefix
	Gateway netip.Addr // the router's address on this subnet
}

// bridge names the rack's bridge inside the router namespace.
func (r Rack) bridge() string { return "br-" + r.Name }

// Host is one lab machine: a network namespace with one interface, eth0.
type Host struct {
	Name string
	Rack string
	Addr netip.Addr
}

// Topology is the lab's network plan. The zero value is unusable; start from
// Default.
type Topology struct {
	Prefix string
	Racks  []Rack
	Hosts  []Host
}

// Default is the two-rack plan of the design brief: m1 in rack r1, m2 in rack
// r2, the three etcd members in their own rack, and an observer host (obs) on
// a control subnet that faults never touch, from which the lab watches etcd.
func Default(prefix string) *Topology {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	return &Topology{
		Prefix: prefix,
		Racks: []Rack{
			{Name: "r1", Subnet: p("10.77.1.0/24"), Gateway: a("10.77.1.1")},
			{Name: "r2", Subnet: p("10.77.2.0/24"), Gateway: a("10.77.2.1")},
			{Name: "etcd", Subnet: p("10.77.3.0/24"), Gateway: a("10.77.3.1")},
			{Name: "ctl", Subnet: p("10.77.9.0/24"), Gateway: a("10.77.9.1")},
		},
		Hosts: []Host{
			{Name: "m1", Rack: "r1", Addr: a("10.77.1.11")},
			{Name: "m2", Rack: "r2", Addr: a("10.77.2.12")},
			{Name: "e1", Rack: "etcd", Addr: a("10.77.3.21")},
			{Name: "e2", Rack: "etcd", Addr: a("10.77.3.22")},
			{Name: "e3", Rack: "etcd", Addr: a("10.77.3.23")},
			{Name: "obs", Rack: "ctl", Addr: a("10.77.9.99")},
		},
	}
}

// NetNS is the namespace name of host (or of RouterName).
func (t *Topology) NetNS(host string) string { return t.Prefix + "-" + host }

// NetNSPath is the bind-mounted namespace file of host, what systemd-nspawn's
// --network-namespace-path and setns(2) take.
func (t *Topology) NetNSPath(host string) string { return filepath.Join(netnsDir, t.NetNS(host)) }

// Host returns the named host.
func (t *Topology) Host(name string) (Host, error) {
	for _, h := range t.Hosts {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, fmt.Errorf("topo: no host %q", name)
}

// Addr is host's address; it panics on an unknown host, which is a bug in the
// caller's scenario, not a runtime condition.
func (t *Topology) Addr(host string) netip.Addr {
	h, err := t.Host(host)
	if err != nil {
		panic(err)
	}
	return h.Addr
}

// InRack lists the hosts of rack.
func (t *Topology) InRack(rack string) []string {
	var out []string
	for _, h := range t.Hosts {
		if h.Rack == rack {
			out = append(out, h.Name)
		}
	}
	return out
}

func (t *Topology) rack(name string) (Rack, error) {
	for _, r := range t.Racks {
		if r.Name == name {
			return r, nil
		}
	}
	return Rack{}, fmt.Errorf("topo: no rack %q", name)
}

// Up creates whatever part of the topology is missing and leaves the rest as
// it is, so it is safe to run again on a running lab. Faults in place are
// kept; Heal removes them.
func (t *Topology) Up(ctx context.Context) error {
	if t.Prefix == "" {
		return errors.New("topo: empty prefix")
	}
	names := []string{RouterName}
	for _, h := range t.Hosts {
		names = append(names, h.Name)
	}
	for _, n := range names {
		if err := t.ensureNetNS(ctx, n); err != nil {
			return err
		}
	}
	rt := t.NetNS(RouterName)
	// Forwarding is a per-namespace sysctl; /proc/sys/net resolves to the
	// namespace of the process that opens it, hence `ip netns exec`.
	if err := run(ctx, "ip", "netns", "exec", rt, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	for _, r := range t.Racks {
		if !linkExists(ctx, rt, r.bridge()) {
			if err := ipn(ctx, rt, "link", "add", r.bridge(), "type", "bridge"); err != nil {
				return err
			}
		}
		gw := netip.PrefixFrom(r.Gateway, r.Subnet.Bits()).String()
		if err := ipn(ctx, rt, "addr", "replace", gw, "dev", r.bridge()); err != nil {
			return err
		}
		if err := ipn(ctx, rt, "link", "set", r.bridge(), "up"); err != nil {
			return err
		}
	}
	for _, h := range t.Hosts {
		if err := t.upHost(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

func (t *Topology) upHost(ctx context.Context, h Host) error {
	r, err := t.rack(h.Rack)
	if err != nil {
		return err
	}
	if !r.Subnet.Contains(h.Addr) {
		return fmt.Errorf("topo: host %s address %s is outside rack %s (%s)", h.Name, h.Addr, r.Name, r.Subnet)
	}
	rt, ns := t.NetNS(RouterName), t.NetNS(h.Name)
	port := "v-" + h.Name // the router's end of the host's cable
	if !linkExists(ctx, rt, port) {
		// A half-made pair from an interrupted run would block the add.
		if linkExists(ctx, ns, "eth0") {
			if err := ipn(ctx, ns, "link", "del", "eth0"); err != nil {
				return err
			}
		}
		if err := ipn(ctx, rt, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
			return err
		}
	}
	steps := [][]string{
		{rt, "link", "set", port, "master", r.bridge()},
		{rt, "link", "set", port, "up"},
		{ns, "addr", "replace", netip.PrefixFrom(h.Addr, r.Subnet.Bits()).String(), "dev", "eth0"},
		{ns, "link", "set", "eth0", "up"},
		{ns, "route", "replace", "default", "via", r.Gateway.String(), "dev", "eth0"},
	}
	for _, s := range steps {
		if err := ipn(ctx, s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func (t *Topology) ensureNetNS(ctx context.Context, name string) error {
	ns := t.NetNS(name)
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); err != nil {
		if err := run(ctx, "ip", "netns", "add", ns); err != nil {
			return err
		}
	}
	return ipn(ctx, ns, "link", "set", "lo", "up")
}

// Down deletes every namespace of this topology. Processes still inside one
// keep it alive (the kernel frees a namespace with its last user); the lab
// stops them first.
func (t *Topology) Down(ctx context.Context) error {
	return CleanupStale(ctx, t.Prefix)
}

// Namespaces lists existing namespace names that belong to prefix.
func Namespaces(prefix string) ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topo: list %s: %w", netnsDir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// CleanupStale deletes every namespace named prefix-*, whoever made it: a lab
// that crashed leaves them behind, and they are found only by name.
func CleanupStale(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("topo: refusing to clean up an empty prefix")
	}
	nss, err := Namespaces(prefix)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss {
		if err := run(ctx, "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Cut makes every host in a unable to exchange packets with every host in b,
// with a blackhole route on both ends (brief section 7). Nothing crosses and
// no ICMP error comes back: a new connection fails at its sender (the kernel
// refuses to route it), and an established TCP connection stalls on
// retransmissions the way it does behind a dead switch.
func (t *Topology) Cut(ctx context.Context, a, b []string) error {
	return t.pairs(ctx, a, b, "replace")
}

// Heal undoes Cut for the same sets.
func (t *Topology) Heal(ctx context.Context, a, b []string) error {
	return t.pairs(ctx, a, b, "del")
}

// pairs adds (verb "replace") or removes ("del") the blackhole routes
// between a and b: one `ip -batch` per namespace, all namespaces at once,
// so that a cut or heal of a rack (~20 routes) lands within tens of
// milliseconds instead of one `ip` call after the other (~1 s): a heal
// must be placeable inside a connection's TCP user timeout.
func (t *Topology) pairs(ctx context.Context, a, b []string, verb string) error {
	routes := map[string][]netip.Addr{} // netns -> blackholed destinations
	var order []string
	for _, x := range a {
		for _, y := range b {
			if x == y {
				continue
			}
			for _, p := range [][2]string{{x, y}, {y, x}} {
				from, to := p[0], p[1]
				th, err := t.Host(to)
				if err != nil {
					return err
				}
				if _, err := t.Host(from); err != nil {
					return err
				}
				ns := t.NetNS(from)
				if _, ok := routes[ns]; !ok {
					order = append(order, ns)
				}
				if !slices.Contains(routes[ns], th.Addr) {
					routes[ns] = append(routes[ns], th.Addr)
				}
			}
		}
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, ns := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = blackholes(ctx, ns, verb, routes[ns])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// blackholes runs one `ip -batch` in ns that adds or removes the blackhole
// routes to dsts (a removal only of those present).
func blackholes(ctx context.Context, ns, verb string, dsts []netip.Addr) error {
	if verb == "del" {
		have := Blackholes(ctx, ns)
		dsts = slices.DeleteFunc(slices.Clone(dsts), func(a netip.Addr) bool { return !slices.Contains(have, a) })
	}
	if len(dsts) == 0 {
		return nil
	}
	var script strings.Builder
	for _, d := range dsts {
		fmt.Fprintf(&script, "route %s blackhole %s\n", verb, netip.PrefixFrom(d, d.BitLen()))
	}
	cmd := exec.CommandContext(ctx, "ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("topo: ip -n %s -batch (%s): %w: %s", ns, strings.ReplaceAll(strings.TrimSpace(script.String()), "\n", "; "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// CutRacks cuts every host of rack a from every host of rack b.
func (t *Topology) CutRacks(ctx context.Context, a, b string) error {
	return t.Cut(ctx, t.InRack(a), t.InRack(b))
}

// HealAll removes every blackhole route from every host and every silence
// rule from the router.
func (t *Topology) HealAll(ctx context.Context) error {
	errs := []error{t.unsilenceAll(ctx)}
	for _, h := range t.Hosts {
		for _, addr := range Blackholes(ctx, t.NetNS(h.Name)) {
			errs = append(errs, ipn(ctx, t.NetNS(h.Name), "route", "del", "blackhole", addr.String()+"/32"))
		}
	}
	return errors.Join(errs...)
}

// Cuts lists the faults in place as host -> peers whose packets it drops.
func (t *Topology) Cuts(ctx context.Context) map[string][]string {
	out := map[string][]string{}
	for _, h := range t.Hosts {
		for _, addr := range Blackholes(ctx, t.NetNS(h.Name)) {
			for _, p := range t.Hosts {
				if p.Addr == addr {
					out[h.Name] = append(out[h.Name], p.Name)
				}
			}
		}
		slices.Sort(out[h.Name])
	}
	return out
}

// Blackholes lists the blackhole destinations in namespace ns (none when it
// does not exist).
func Blackholes(ctx context.Context, ns string) []netip.Addr {
	out, err := exec.CommandContext(ctx, "ip", "-n", ns, "route", "show", "type", "blackhole").Output()
	if err != nil {
		return nil
	}
	var addrs []netip.Addr
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		// `ip route show type blackhole` prints "blackhole 10.77.3.21".
		dst := strings.TrimSuffix(f[1], "/32")
		if a, err := netip.ParseAddr(dst); err == nil {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

func linkExists(ctx context.Context, ns, link string) bool {
	return exec.CommandContext(ctx, "ip", "-n", ns, "link", "show", "dev", link).Run() == nil
}

func ipn(ctx context.Context, ns string, args ...string) error {
	return run(ctx, "ip", append([]string{"-n", ns}, args...)...)
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("topo: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
