package tcpproxy

import (
	"errors"
)

// Group is one proxy per target, switched together: what a test needs to
// cut one client off from every member of a cluster at once.
type Group struct {
	proxies []*Proxy
}

// NewGroup starts a proxy for each target ("host:port"), in order.
func NewGroup(targets ...string) (*Group, error) {
	g := &Group{}
	for _, t := range targets {
		p, err := New(t)
		if err != nil {
			_ = g.Close()
			return nil, err
		}
		g.proxies = append(g.proxies, p)
	}
	return g, nil
}

// Proxy returns the proxy for targets[i], to cut one link only.
func (g *Group) Proxy(i int) *Proxy { return g.proxies[i] }

// Addrs are the proxies' listening addresses, in target order.
func (g *Group) Addrs() []string {
	out := make([]string, len(g.proxies))
	for i, p := range g.proxies {
		out[i] = p.Addr()
	}
	return out
}

// Blackhole switches every proxy of the group.
func (g *Group) Blackhole(on bool) {
	for _, p := range g.proxies {
		p.Blackhole(on)
	}
}

// Close closes every proxy.
func (g *Group) Close() error {
	var errs []error
	for _, p := range g.proxies {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
