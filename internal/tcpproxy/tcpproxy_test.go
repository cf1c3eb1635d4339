package tcpproxy_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
)

// quiet is how long a test waits to conclude that nothing arrives. It proves
// only absence, never speed.
const quiet = 300 * time.Millisecond

// server is a loopback TCP server whose first accepted connection is driven
// by the test: every byte it receives goes to got, and it writes what the
// test sends on send.
type server struct {
	ln       net.Listener
	accepted atomic.Int32
	got      chan []byte
	send     chan []byte
	closed   chan struct{} // closed when the peer's close reached the server
}

func newServer(t *testing.T) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{ln: ln, got: make(chan []byte, 16), send: make(chan []byte, 16), closed: make(chan struct{})}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if s.accepted.Add(1) > 1 {
				go echo(c)
				continue
			}
			go func() {
				for b := range s.send {
					_, _ = c.Write(b)
				}
			}()
			go func() {
				defer c.Close()
				defer close(s.closed)
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						s.got <- bytes.Clone(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func echo(c net.Conn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
}

func newProxy(t *testing.T, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readN reads exactly len(want) bytes within d and compares them.
func readN(t *testing.T, c net.Conn, want string, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, len(want))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read %q: %v", want, err)
	}
	if string(buf) != want {
		t.Fatalf("read %q, want %q", buf, want)
	}
}

// readNothing asserts that no byte and no close arrives within quiet.
func readNothing(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(quiet))
	n, err := c.Read(make([]byte, 16))
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during blackhole: %d bytes, err %v; want nothing and a timeout", n, err)
	}
}

func expectGot(t *testing.T, s *server, want string) {
	t.Helper()
	var got []byte
	deadline := time.After(10 * time.Second)
	for len(got) < len(want) {
		select {
		case b := <-s.got:
			got = append(got, b...)
		case <-deadline:
			t.Fatalf("server got %q, want %q", got, want)
		}
	}
	if string(got) != want {
		t.Fatalf("server got %q, want %q", got, want)
	}
}

func expectNotGot(t *testing.T, s *server) {
	t.Helper()
	select {
	case b := <-s.got:
		t.Fatalf("server received %q during blackhole", b)
	case <-time.After(quiet):
	}
}

func TestForwardsBothWays(t *testing.T) {
	s := newServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	expectGot(t, s, "ping")
	s.send <- []byte("pong")
	readN(t, c, "pong", 10*time.Second)
}

func TestBlackholeHoldsBothDirectionsWithoutClosing(t *testing.T) {
	s := newServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	expectGot(t, s, "a")

	p.Blackhole(true)
	if !p.Blackholed() {
		t.Fatal("Blackholed() = false after Blackhole(true)")
	}
	// Client to server: the write succeeds locally (nothing is reset), the
	// server sees nothing.
	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatalf("write during blackhole: %v", err)
	}
	expectNotGot(t, s)
	// Server to client: likewise.
	s.send <- []byte("x")
	readNothing(t, c)

	// A new connection is accepted but never reaches the target.
	c2 := dial(t, p.Addr())
	if _, err := c2.Write([]byte("hello")); err != nil {
		t.Fatalf("write on a connection made during blackhole: %v", err)
	}
	readNothing(t, c2)
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("target accepted %d connections during blackhole, want 1 (the one from before)", n)
	}

	// Healing delivers what was held, in order, on the same connections.
	p.Blackhole(false)
	expectGot(t, s, "b")
	readN(t, c, "x", 10*time.Second)
	readN(t, c2, "hello", 10*time.Second)
	if _, err := c.Write([]byte("c")); err != nil {
		t.Fatal(err)
	}
	expectGot(t, s, "c")
}

func TestCloseDuringBlackholeIsHeld(t *testing.T) {
	s := newServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	expectGot(t, s, "a")
	p.Blackhole(true)
	_ = c.Close()
	select {
	case <-s.closed:
		t.Fatal("client's close reached the server through a blackhole")
	case <-time.After(quiet):
	}
	p.Blackhole(false)
	select {
	case <-s.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("client's close never reached the server after the heal")
	}
}

func TestCloseEndsConnections(t *testing.T) {
	s := newServer(t)
	p := newProxy(t, s.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	expectGot(t, s, "a")
	p.Blackhole(true) // Close must not hang on a blackholed proxy
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Close: %d bytes, %v; want the connection closed", n, err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("proxy still accepts after Close")
	}
}

func TestTargetDownClosesClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens on addr now
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read through a proxy whose target is down: %v; want the connection closed", err)
	}
}
