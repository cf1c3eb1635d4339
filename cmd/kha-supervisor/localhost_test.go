package main

import (
	"net"
	"strings"
	"testing"
)

// An address of this machine's interfaces is local; loopback (the default
// endpoint), an address of no interface and a name other than the host's
// are not.
func TestIsLocalHost(t *testing.T) {
	var own string
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			own = n.IP.String()
			break
		}
	}
	if own == "" {
		t.Fatal("this machine has no non-loopback address to test with")
	}
	if !isLocalHost(own) {
		t.Errorf("isLocalHost(%s) = false, an address of this machine", own)
	}
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "192.0.2.1", "etcd-1.example.invalid"} {
		if isLocalHost(h) {
			t.Errorf("isLocalHost(%s) = true", h)
		}
	}
}

// check-config warns (and accepts) when an etcd endpoint is this machine
// and [etcd_fence] is off.
func TestCheckConfigWarnsOfStackedEtcdWithoutTheFenceAtEtcd(t *testing.T) {
	var own string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			own = n.IP.String()
			break
		}
	}
	if own == "" {
		t.Fatal("this machine has no IPv4 address to test with")
	}
	file := checkConfigFile(t, "node = \"m1\"\n[etcd]\nendpoints = [\"https://"+own+":2379\", \"https://192.0.2.1:2379\"]\n")
	code, out, errs := runCheckConfig(t, "-c", file)
	want := "warning: etcd.endpoints https://" + own + ":2379: an etcd member on this node (stacked etcd) and [etcd_fence] off"
	if code != exitOK || !strings.Contains(errs, want) || !strings.Contains(out, "# WARNING: etcd.endpoints https://"+own) {
		t.Fatalf("exit %d, stderr %q; want 0 and %q", code, errs, want)
	}
}
