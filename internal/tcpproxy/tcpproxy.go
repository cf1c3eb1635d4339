// Package tcpproxy is a loopback TCP proxy that a test puts between one
// client (a supervisor) and its server (an etcd member) so it can cut that
// client off without touching anyone else.
//
// Blackhole models a silent partition, like `ip route add blackhole`: nothing
// is closed or reset, bytes simply stop arriving in both directions, and a
// new connection is accepted but never reaches the target. Bytes sent during
// the blackhole are held, not discarded, and delivered when it is lifted,
// the way TCP retransmission delivers them once a route heals; if an
// endpoint gives up meanwhile (a keepalive timeout closes its socket), the
// close is held as well and reaches the other side after the heal.
package tcpproxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards every connection accepted on its loopback address to one
// target address.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{} // closed by Close

	accepted atomic.Int64
	delay    atomic.Int64 // time.Duration each chunk is held before it is written on

	mu    sync.Mutex
	open  chan struct{}         // closed while traffic flows; a fresh channel while blackholed
	conns map[net.Conn]struct{} // every live socket, both sides, for Close
	wg    sync.WaitGroup
}

// New listens on 127.0.0.1 on a free port and forwards to target
// ("host:port"). The target is dialled per connection, so it need not be up
// yet.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tcpproxy: listen: %w", err)
	}
	open := make(chan struct{})
	close(open)
	p := &Proxy{
		target: target,
		ln:     ln,
		done:   make(chan struct{}),
		open:   open,
		conns:  map[net.Conn]struct{}{},
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Accepted is the number of connections accepted so far; a test can tell
// from it whether a client reconnected.
func (p *Proxy) Accepted() int { return int(p.accepted.Load()) }

// Blackhole starts (true) or ends (false) the silent partition. Bytes already
// handed to the other side's socket before the call may still arrive, as
// packets in flight would.
func (p *Proxy) Blackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open: // flowing
		if on {
			p.open = make(chan struct{})
		}
	default: // blackholed
		if !on {
			close(p.open)
		}
	}
}

// Blackholed reports whether the proxy currently holds all traffic.
func (p *Proxy) Blackholed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		return false
	default:
		return true
	}
}

// Close stops listening, closes every connection on both sides (held bytes
// are discarded) and waits for the proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return nil
	default:
	}
	close(p.done)
	err := p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// flowing blocks while the proxy is blackholed and reports false once the
// proxy is closed.
func (p *Proxy) flowing() bool {
	for {
		p.mu.Lock()
		open := p.open
		p.mu.Unlock()
		select {
		case <-p.done:
			return false
		case <-open:
			// Blackhole may have been switched on again between the
			// channel being closed and this read: check once more.
			if !p.Blackholed() {
				return true
			}
		}
	}
}

// track registers c for Close; it reports false (and closes c) if the proxy
// is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		_ = c.Close()
		return false
	default:
		p.conns[c] = struct{}{}
		return true
	}
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			select {
			case <-p.done:
			default:
				slog.Error("tcpproxy: accept failed; proxy stops accepting", "addr", p.Addr(), "err", err)
			}
			return
		}
		if !p.track(c) {
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve connects one accepted client to the target once traffic flows, so a
// connection made during a blackhole reaches nothing until it ends.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.flowing() {
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		// What a client sees when the target is down: its connection is
		// closed right after being accepted.
		slog.Debug("tcpproxy: dial target failed", "target", p.target, "err", err)
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(server, client) })
	wg.Go(func() { p.pipe(client, server) })
	wg.Wait()
}

// pipe copies src to dst, holding every write (and the final close) while
// the proxy is blackholed, and delaying each chunk by the proxy's delay
// (see SetDelay). On EOF it half-closes dst so the other direction can
// finish; on any other error it closes both sockets.
func (p *Proxy) pipe(dst, src net.Conn) {
	line := newDelayLine(dst, src)
	defer line.close()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := src.Read(buf)
		read := time.Now()
		if !p.flowing() {
			return
		}
		if n > 0 && !line.send(buf[:n], read.Add(p.Delay())) {
			return
		}
		if rerr == nil {
			continue
		}
		if errors.Is(rerr, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				line.close()
				_ = cw.CloseWrite()
				return
			}
		}
		line.close()
		_ = src.Close()
		_ = dst.Close()
		return
	}
}
