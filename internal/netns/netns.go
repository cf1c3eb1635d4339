// Package netns runs code inside a network namespace, for tests and the lab
// (lab/topo's Do is this one).
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread that has joined the network namespace at path.
// Sockets fn creates belong to that namespace for their whole life, whatever
// thread later reads them; that is how the host-side lab talks to its hosts
// without giving the root namespace a route into the lab.
//
// The thread returns to its own namespace afterwards and goes back to the
// pool. Letting it die instead would be simpler but wrong here: a child
// started with Pdeathsig (systemd-nspawn) is signalled when the THREAD that
// forked it exits, and that may be this one. Only if switching back fails
// does the thread stay locked, so the runtime discards it rather than run
// other goroutines in the lab's namespace.
func Do(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: open own namespace: %w", err)
			return
		}
		defer home.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: open namespace: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: join namespace %s: %w", path, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("netns: return from namespace %s: %w", path, err))
			return // still locked: the thread ends with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
