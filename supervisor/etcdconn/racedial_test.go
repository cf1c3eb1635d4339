package etcdconn

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scriptedDial hands out attempts in order: attempt i gets plan[i] (nil:
// hang until its context ends, as an unanswered SYN; an error: fail at
// once; "ok": connect). It records how each attempt ended.
type scriptedDial struct {
	mu       sync.Mutex
	plan     []error
	attempts int
	conns    []*trackedConn
	ended    chan struct{}
}

var errConnect = errors.New("connect")

type trackedConn struct {
	net.Conn
	mu     sync.Mutex
	closed bool
}

func (c *trackedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *trackedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (d *scriptedDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	i := d.attempts
	d.attempts++
	d.mu.Unlock()
	defer func() { d.ended <- struct{}{} }()
	if i >= len(d.plan) || d.plan[i] == nil {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if d.plan[i] != errConnect {
		return nil, d.plan[i]
	}
	c := &trackedConn{}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return c, nil
}

// A SYN lost in a partition does not hold the dial: the attempt started
// after it connects, and the one still waiting is cancelled, not leaked.
func TestRaceDialConnectsPastAnUnansweredAttempt(t *testing.T) {
	d := &scriptedDial{plan: []error{nil, nil, errConnect}, ended: make(chan struct{}, 10)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	before := runtime.NumGoroutine()
	c, err := raceDial(ctx, d.dial, "10.0.0.1:2379", 5*time.Millisecond)
	if err != nil {
		t.Fatalf("raceDial: %v, want the third attempt's connection", err)
	}
	if c != d.conns[0] {
		t.Fatalf("raceDial returned %v, not the attempt that connected", c)
	}
	for range 3 {
		select {
		case <-d.ended:
		case <-time.After(5 * time.Second):
			t.Fatal("an unanswered attempt was not cancelled after the dial returned")
		}
	}
	if c.(*trackedConn).isClosed() {
		t.Error("the winning connection was closed")
	}
	// Every attempt's goroutine ends, its result taken: none is left
	// blocked on the results channel.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the dial, %d before: an attempt's result was never taken", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two attempts that both connect: the caller gets one, the other is closed.
func TestRaceDialClosesTheLosers(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var conns []*trackedConn
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-release
		c := &trackedConn{}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return c, nil
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // several attempts started
		close(release)
	}()
	got, err := raceDial(context.Background(), dial, "10.0.0.1:2379", 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		open, n := 0, len(conns)
		for _, c := range conns {
			if !c.isClosed() {
				open++
			}
		}
		mu.Unlock()
		if n >= 2 && open == 1 && !got.(*trackedConn).isClosed() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections, %d open: want every one but the caller's closed", n, open)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A refusal ends the dial at once (gRPC's backoff redials), and so does
// the connect deadline, with the context's error.
func TestRaceDialEndsOnRefusalAndDeadline(t *testing.T) {
	d := &scriptedDial{plan: []error{nil, syscall.ECONNREFUSED}, ended: make(chan struct{}, 10)}
	if _, err := raceDial(context.Background(), d.dial, "10.0.0.1:2379", 5*time.Millisecond); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refused: %v, want ECONNREFUSED", err)
	}
	d = &scriptedDial{ended: make(chan struct{}, 1000)}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := raceDial(ctx, d.dial, "10.0.0.1:2379", 5*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("silent until the deadline: %v, want DeadlineExceeded", err)
	}
}

// Unix sockets are dialled once, at the path gRPC's own dialer would use.
func TestRaceDialerUnixTargets(t *testing.T) {
	for addr, want := range map[string]string{
		"unix:etcd.sock":        "etcd.sock",
		"unix:///run/etcd.sock": "/run/etcd.sock",
		"unix://etcd.sock":      "etcd.sock",
		"unix:/run/etcd.sock":   "/run/etcd.sock",
	} {
		var gotNet, gotAddr string
		calls := 0
		dial := raceDialer(func(_ context.Context, network, address string) (net.Conn, error) {
			calls++
			gotNet, gotAddr = network, address
			return nil, syscall.ENOENT
		})
		if _, err := dial(context.Background(), addr); !errors.Is(err, syscall.ENOENT) || calls != 1 || gotNet != "unix" || gotAddr != want {
			t.Errorf("%s: dialled %d times %s %q (%v), want once unix %q", addr, calls, gotNet, gotAddr, err, want)
		}
	}
	if _, ok := unixPath("10.0.0.1:2379"); ok {
		t.Error("a TCP address taken for a unix socket")
	}
}
