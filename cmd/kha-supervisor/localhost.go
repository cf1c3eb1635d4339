package main

import (
	"net"
	"os"
	"strings"
)

// isLocalHost reports whether host (from an etcd endpoint) names this
// machine by its host name or by an address of one of its interfaces. A
// loopback endpoint does not count: it is the default, and a stacked
// member's supervisors list every member by the address the others reach
// it at. No name is resolved: a start-up check must not wait for DNS.
func isLocalHost(host string) bool {
	if name, err := os.Hostname(); err == nil && strings.EqualFold(host, name) {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
