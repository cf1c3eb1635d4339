package commits

import (
	"net"
	"sync"
	"testing"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// valveProxy forwards TCP connections to target; each direction can be
// held (bytes read stay in the proxy, the rest in the kernel's buffers,
// as in a partition), and lets everything through when released.
type valveProxy struct {
	ln           net.Listener
	target       string
	mu           sync.Mutex
	toEtcd, back chan struct{} // closed while flowing
}

func newValveProxy(t *testing.T, target string) *valveProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &valveProxy{ln: ln, target: target, toEtcd: make(chan struct{}), back: make(chan struct{})}
	close(p.toEtcd)
	close(p.back)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go p.pipe(s, c, func() chan struct{} { p.mu.Lock(); defer p.mu.Unlock(); return p.toEtcd })
			go p.pipe(c, s, func() chan struct{} { p.mu.Lock(); defer p.mu.Unlock(); return p.back })
		}
	}()
	return p
}

func (p *valveProxy) Addr() string { return p.ln.Addr().String() }

// hold sets which directions are held.
func (p *valveProxy) hold(toEtcd, back bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := func(ch *chan struct{}, held bool) {
		select {
		case <-*ch:
			if held {
				*ch = make(chan struct{})
			}
		default:
			if !held {
				close(*ch)
			}
		}
	}
	set(&p.toEtcd, toEtcd)
	set(&p.back, back)
}

func (p *valveProxy) pipe(dst, src net.Conn, open func() chan struct{}) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-open()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed side: close both
			return
		}
	}
}
