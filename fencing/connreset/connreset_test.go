package connreset

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// Reset destroys this host's connections to the given address and only
// those: the client side of a loopback connection to it fails at its next
// use with ECONNABORTED, a connection to another listener carries on.
func TestResetDestroysConnectionsToTheAddress(t *testing.T) {
	testenv.RequireRoot(t)
	target, other := listen(t), listen(t)
	c1, c2 := dial(t, target), dial(t, other)

	res, err := Reset([]netip.AddrPort{netip.MustParseAddrPort(target.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 1 || res.Destroyed != 1 {
		t.Fatalf("Reset = %+v, want the one connection to %s found and destroyed", res, target.Addr())
	}
	_ = c1.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c1.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNABORTED) {
		t.Fatalf("read on the reset connection: %v, want ECONNABORTED", err)
	}
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatalf("the connection to another address: %v", err)
	}
}

// An IPv6 address is named in the error, not silently skipped.
func TestResetRefusesIPv6(t *testing.T) {
	_, err := Reset([]netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:2379")})
	if !errors.Is(err, ErrIPv6) {
		t.Fatalf("err %v, want ErrIPv6", err)
	}
}

func TestEndpoints(t *testing.T) {
	lookup := func(host string) ([]netip.Addr, error) {
		if host == "etcd-1.example" {
			return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
		}
		return nil, errors.New("no such host")
	}
	got, err := Endpoints([]string{"https://10.0.0.1:2379", "https://etcd-1.example:2379", "http://nowhere:2379", "https://10.0.0.2"}, lookup)
	want := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:2379"), netip.MustParseAddrPort("10.0.0.7:2379")}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Endpoints = %v, want %v", got, want)
	}
	if err == nil {
		t.Fatal("no error for the unresolvable and the portless entries")
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return l
}

func dial(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// As root (the tests' and the packaged unit's case) the capability is there.
func TestCapable(t *testing.T) {
	testenv.RequireRoot(t)
	ok, err := Capable()
	if err != nil || !ok {
		t.Fatalf("Capable() = %v, %v as root", ok, err)
	}
}
