package topo

import (
	"context"
	"net"

	"github.com/kha-supervisor/kha-supervisor/internal/netns"
)

// Do runs fn on an OS thread that has joined the network namespace at path
// (internal/netns: the product's tests use it too).
func Do(path string, fn func() error) error { return netns.Do(path, fn) }

// DialContext connects from inside host's namespace.
func (t *Topology) DialContext(ctx context.Context, host, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := Do(t.NetNSPath(host), func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen opens a listener inside host's namespace.
func (t *Topology) Listen(host, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := Do(t.NetNSPath(host), func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}
