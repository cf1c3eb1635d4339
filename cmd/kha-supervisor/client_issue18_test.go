package main

import (
	"bytes"
	"context"
	"log"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
)

// blackhole accepts TCP connections and never answers: a host that is up
// but whose etcd hangs, or a firewall that swallows the handshake.
func blackhole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

// closedPort is an address where nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// goLog is the log package's line prefix, "2026/12/02 07:00:04 ".
var goLog = regexp.MustCompile(`(?m)^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d `)

// One dead endpoint of two: a client command answers from the live one
// without waiting for the dead one, and prints no Go-log line.
func TestClientIgnoresADeadEndpoint(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	leader, _ := supervisortest.LeaderOf(t, w.Start("m1", nil))
	live := w.Cluster.Endpoints()[0]
	// slog.Default writes through the log package: catch what leaks there.
	var leaked bytes.Buffer
	log.SetOutput(&leaked)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	for name, dead := range map[string]string{"blackhole": "http://" + blackhole(t), "closed port": "http://" + closedPort(t)} {
		t.Run(name, func(t *testing.T) {
			for _, order := range [][]string{{dead, live}, {live, dead}} {
				var out, errb bytes.Buffer
				start := time.Now()
				code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }},
					[]string{"status", "--endpoints", strings.Join(order, ","), "--cluster", "test", "--dial-timeout", "10s", "--command-timeout", "20s"})
				took := time.Since(start)
				t.Logf("status --endpoints %s: exit %d in %s\nstdout:\n%sstderr:\n%s", strings.Join(order, ","), code, took, out.String(), errb.String())
				if code != exitOK && code != exitNoStandby || !strings.Contains(out.String(), "leader "+leader.Name) {
					t.Errorf("exit %d, no leader %s in the output", code, leader.Name)
				}
				if goLog.MatchString(errb.String()+out.String()) || leaked.Len() > 0 {
					t.Errorf("a log line leaked:\n%s%s", errb.String(), leaked.String())
				}
				leaked.Reset()
				// With a 10 s dial timeout a command that waits for the dead
				// endpoint takes at least that; a loaded machine's start-up
				// and reads stay far below 5 s.
				if took > 5*time.Second {
					t.Errorf("took %s: waited for the dead endpoint", took)
				}
			}
		})
	}
}

// Bare host:port endpoints (http without TLS), --dial-timeout and
// --command-timeout (and their variables) on the client commands.
func TestClientEndpointsAndTimeouts(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	leader, _ := supervisortest.LeaderOf(t, w.Start("m1", nil))
	hostPort := strings.TrimPrefix(w.Cluster.Endpoints()[0], "http://")
	run := func(vars map[string]string, args ...string) (int, string, time.Duration) {
		t.Helper()
		var out bytes.Buffer
		start := time.Now()
		code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &out, getenv: func(k string) string { return vars[k] }}, args)
		took := time.Since(start)
		t.Logf("$ kha-supervisor %s -> %d in %s\n%s", strings.Join(args, " "), code, took, out.String())
		return code, out.String(), took
	}
	if code, out, _ := run(nil, "status", "--endpoints", hostPort, "--cluster", "test"); code != exitNoStandby || !strings.Contains(out, "leader "+leader.Name) {
		t.Errorf("status --endpoints %s: exit %d", hostPort, code)
	}
	if code, out, _ := run(map[string]string{"KHA_DIAL_TIMEOUT": "5"}, "status", "--endpoints", hostPort, "--cluster", "test"); code != exitConfig ||
		!strings.Contains(out, `KHA_DIAL_TIMEOUT="5": no unit`) {
		t.Errorf("KHA_DIAL_TIMEOUT=5: exit %d", code)
	}
	if code, out, _ := run(nil, "status", "--endpoints", hostPort, "--cluster", "test", "--command-timeout", "1ns"); code != exitFailure ||
		!strings.Contains(out, "deadline") {
		t.Errorf("--command-timeout 1ns: exit %d, want %d and a deadline", code, exitFailure)
	}
	// Nothing answers: the dial timeout bounds the wait (default: 2 s for
	// the connection plus 1 s for the request, twice with the diagnosis).
	dead := closedPort(t)
	code, out, took := run(map[string]string{"KHA_DIAL_TIMEOUT": "200ms"}, "status", "--endpoints", dead, "--cluster", "test")
	if code != exitFailure || !strings.Contains(out, dead) || took > 4500*time.Millisecond {
		t.Errorf("dead endpoint with KHA_DIAL_TIMEOUT=200ms: exit %d in %s", code, took)
	}
}

// status --watch says when etcd stops answering, within about an interval,
// instead of going silent; without a terminal it never redraws.
func TestStatusWatchSaysEtcdDoesNotAnswer(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	supervisortest.LeaderOf(t, w.Start("m1", nil))
	p, err := tcpproxy.New(strings.TrimPrefix(w.Cluster.Endpoints()[0], "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- dispatch(env{ctx: ctx, stdout: &out, stderr: &out, getenv: func(string) string { return "" }},
			[]string{"status", "--watch", "--interval", "300ms", "--endpoints", p.Addr(), "--cluster", "test"})
	}()
	supervisortest.WaitFor(t, "a first frame", 10*time.Second, func() bool { return strings.Contains(out.String(), "leader m1") })
	p.Blackhole(true)
	supervisortest.WaitFor(t, "status --watch to say etcd does not answer", 10*time.Second, func() bool {
		return strings.Contains(out.String(), "etcd does not answer (last answer ")
	})
	cancel()
	<-done
	if strings.Contains(out.String(), "\x1b[") {
		t.Errorf("redraws without a terminal:\n%q", out.String())
	}
	t.Logf("%s", out.String())
}

func TestLeaseText(t *testing.T) {
	for d, want := range map[time.Duration]string{-time.Second: "expired", -2 * time.Second: "expired", 0: "0s left", 3 * time.Second: "3s left"} {
		if got := leaseText(d); got != want {
			t.Errorf("leaseText(%s) = %q, want %q", d, got, want)
		}
	}
}
