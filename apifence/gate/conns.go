package gate

import (
	"net"
	"sync"
)

// conns tracks the raw TCP connections under the TLS layer, so that Cut can
// close them without a TLS goodbye.
type conns struct {
	mu  sync.Mutex
	set map[*trackedConn]struct{}
}

func newConns() *conns { return &conns{set: map[*trackedConn]struct{}{}} }

func (c *conns) listener(l net.Listener) net.Listener { return trackingListener{l, c} }

// closeAll closes every tracked connection and reports how many.
func (c *conns) closeAll() int {
	c.mu.Lock()
	all := make([]*trackedConn, 0, len(c.set))
	for tc := range c.set {
		all = append(all, tc)
	}
	c.mu.Unlock()
	for _, tc := range all {
		_ = tc.Conn.Close()
	}
	return len(all)
}

func (c *conns) add(tc *trackedConn) {
	c.mu.Lock()
	c.set[tc] = struct{}{}
	c.mu.Unlock()
}

func (c *conns) remove(tc *trackedConn) {
	c.mu.Lock()
	delete(c.set, tc)
	c.mu.Unlock()
}

type trackingListener struct {
	net.Listener
	c *conns
}

func (l trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: conn, c: l.c}
	l.c.add(tc)
	return tc, nil
}

type trackedConn struct {
	net.Conn
	c    *conns
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() { t.c.remove(t) })
	return t.Conn.Close()
}
