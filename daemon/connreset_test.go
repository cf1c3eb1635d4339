package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// The promotion's reset destroys the connections to the endpoints it is
// given and to no other; the fence's, to every endpoint. Each is nil when
// its key is off, and an endpoint the configuration does not list is an
// error, not a silent no-op.
func TestConnResetsPromoteAndFence(t *testing.T) {
	testenv.RequireRoot(t)
	var eps []string
	var conns []net.Conn
	for range 2 {
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
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		eps, conns = append(eps, "http://"+l.Addr().String()), append(conns, c)
	}
	cfg := config.Default()
	cfg.Etcd.Endpoints = eps
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := newConnResets(context.Background(), cfg, log)

	n, err := r.promote(cfg.Etcd)([]string{eps[1]})
	if err != nil || n != 1 {
		t.Fatalf("promotion reset of %s: %d destroyed, %v; want 1", eps[1], n, err)
	}
	if aborted(conns[0]) {
		t.Fatalf("the connection to %s (not silent) was destroyed", eps[0])
	}
	if !aborted(conns[1]) {
		t.Fatalf("the connection to %s (silent) survived", eps[1])
	}
	if _, err := r.promote(cfg.Etcd)([]string{"http://10.9.9.9:2379"}); err == nil || !strings.Contains(err.Error(), "not in etcd.endpoints") {
		t.Fatalf("reset of an endpoint not configured: %v, want it named", err)
	}
	if n, err := r.fence(cfg.Etcd)(); err != nil || n != 1 {
		t.Fatalf("fence reset: %d destroyed, %v; want the one left", n, err)
	}

	cfg.Etcd.ResetSilent = false
	if r.promote(cfg.Etcd) != nil || r.fence(cfg.Etcd) == nil {
		t.Fatal("reset_silent = false must turn off the promotion's reset only")
	}
	cfg.Etcd.ResetOnFence = false
	if newConnResets(context.Background(), cfg, log).fence(cfg.Etcd) != nil {
		t.Fatal("both keys off: a fence reset is still wired")
	}
}

// aborted reports whether c was destroyed (its next read fails with
// ECONNABORTED) rather than merely idle.
func aborted(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, syscall.ECONNABORTED)
}
