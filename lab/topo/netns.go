package topo

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has joined the network namespace at path.
// Sockets fn creates belong to that namespace for their whole life, whatever
// thread later reads them; that is how the host-side lab talks to its hosts
// without giving the root namespace a route into the lab.
//
// The thread stays locked and is never switched back: when the goroutine
// ends, the Go runtime destroys a still-locked thread instead of reusing it,
// so no other goroutine can ever run in the lab's namespace by accident.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			errc <- fmt.Errorf("topo: open namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("topo: join namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

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
