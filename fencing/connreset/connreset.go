// Package connreset destroys this host's TCP connections to given
// addresses, as `ss -K` does: SOCK_DESTROY through the kernel's inet_diag
// netlink interface (CONFIG_INET_DIAG_DESTROY, CAP_NET_ADMIN in the
// sockets' network namespace).
//
// The fence uses it on the etcd endpoints once the managed units are down:
// a request the node's kube-apiserver admitted for a fenced component and
// already wrote to its etcd connection sits in the kernel's send queue
// while a partition drops it, and TCP retransmits it when the partition
// heals, possibly after the next leader's first write (issue 22: the lab
// found such late commits in etcd after rack cuts healed within the
// apiserver's 10 s TCP user timeout). A destroyed socket's queue is
// discarded and never sent; the apiserver reconnects for the requests
// that follow, and a request that was in flight on it fails once
// (gRPC Unavailable), reads retried by the etcd client, writes answered
// with an error to their clients.
//
// Not covered: IPv6 endpoints (the netlink library destroys IPv4 sockets
// only; they are reported, not reset), connections of other network
// namespaces, and requests still inside the apiserver process (not yet
// written to a socket) when the reset runs.
package connreset

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Result counts what Reset did.
type Result struct {
	Destroyed int // connections destroyed
	Matched   int // connections found to the addresses
}

// ErrIPv6 marks an address Reset cannot act on.
var ErrIPv6 = errors.New("IPv6 connections cannot be reset (netlink library: IPv4 only)")

// Reset destroys every TCP connection of this network namespace whose
// remote end is one of remotes. It returns what it found and destroyed,
// and an error naming each address or connection it could not handle.
func Reset(remotes []netip.AddrPort) (Result, error) {
	var res Result
	var errs []error
	want := map[netip.AddrPort]bool{}
	for _, r := range remotes {
		r = netip.AddrPortFrom(r.Addr().Unmap(), r.Port())
		if !r.Addr().Is4() {
			errs = append(errs, fmt.Errorf("%s: %w", r, ErrIPv6))
			continue
		}
		want[r] = true
	}
	if len(want) == 0 {
		return res, errors.Join(errs...)
	}
	socks, err := netlink.SocketDiagTCP(unix.AF_INET)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return res, errors.Join(append(errs, fmt.Errorf("list TCP sockets: %w", err))...)
	}
	for _, s := range socks {
		if s.State == netlink.TCP_LISTEN || s.State == netlink.TCP_CLOSE {
			continue
		}
		dst, ok := netip.AddrFromSlice(s.ID.Destination.To4())
		if !ok || !want[netip.AddrPortFrom(dst, s.ID.DestinationPort)] {
			continue
		}
		res.Matched++
		local := &net.TCPAddr{IP: s.ID.Source, Port: int(s.ID.SourcePort)}
		remote := &net.TCPAddr{IP: s.ID.Destination, Port: int(s.ID.DestinationPort)}
		if err := netlink.SocketDestroy(local, remote); err != nil {
			errs = append(errs, fmt.Errorf("destroy %s -> %s: %w", local, remote, err))
			continue
		}
		res.Destroyed++
	}
	return res, errors.Join(errs...)
}

// Endpoints turns etcd client URLs (https://host:port) into addresses,
// resolving host names with lookup; an entry that does not resolve is
// named in the error and left out.
func Endpoints(urls []string, lookup func(host string) ([]netip.Addr, error)) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	var errs []error
	for _, u := range urls {
		host, port, err := hostPort(u)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			out = append(out, netip.AddrPortFrom(a, port))
			continue
		}
		addrs, err := lookup(host)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		for _, a := range addrs {
			out = append(out, netip.AddrPortFrom(a.Unmap(), port))
		}
	}
	return out, errors.Join(errs...)
}

// hostPort splits an etcd client URL (scheme://host:port, as the
// configuration requires) into its host and port.
func hostPort(raw string) (string, uint16, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil || port == 0 || u.Hostname() == "" {
		return "", 0, fmt.Errorf("not scheme://host:port with a port 1-65535")
	}
	return u.Hostname(), uint16(port), nil
}

// Capable reports whether this process has CAP_NET_ADMIN in its effective
// set, which SOCK_DESTROY needs (read from /proc/self/status).
func Capable() (bool, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		eff, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return false, fmt.Errorf("CapEff %q: %w", hex, err)
		}
		return eff&(1<<unix.CAP_NET_ADMIN) != 0, nil
	}
	return false, errors.New("no CapEff line in /proc/self/status")
}
