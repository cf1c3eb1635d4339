package topo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// testPrefix is unique per test process so that a demo lab and other test
// runs can exist at the same time.
func testPrefix() string { return fmt.Sprintf("kl3t%04x", os.Getpid()&0xffff) }

func newLab(t *testing.T) *Topology {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "sysctl")
	topo := Default(testPrefix())
	ctx := context.Background()
	if err := CleanupStale(ctx, topo.Prefix); err != nil {
		t.Fatalf("cleanup before: %v", err)
	}
	t.Cleanup(func() {
		if err := topo.Down(context.Background()); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}
	return topo
}

// echo serves one line back on every connection, inside host's namespace.
func echo(t *testing.T, topo *Topology, host string) string {
	t.Helper()
	addr := net.JoinHostPort(topo.Addr(host).String(), "7077")
	l, err := topo.Listen(host, "tcp", addr)
	if err != nil {
		t.Fatalf("listen in %s: %v", host, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return addr
}

// roundTrip sends a line from host to addr over conn c and reads it back.
func roundTrip(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo returned %q, sent %q", got, msg)
	}
	return nil
}

func reach(topo *Topology, from, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := topo.DialContext(ctx, from, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTrip(c, "hello from "+from)
}

func TestPartitionAndHeal(t *testing.T) {
	topo := newLab(t)
	ctx := context.Background()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("second up must be a no-op: %v", err)
	}
	e1 := echo(t, topo, "e1")
	m2 := echo(t, topo, "m2")

	for _, p := range [][2]string{{"m1", e1}, {"m2", e1}, {"m1", m2}, {"obs", e1}} {
		if err := reach(topo, p[0], p[1]); err != nil {
			t.Fatalf("before any fault %s -> %s: %v", p[0], p[1], err)
		}
	}

	// An established connection must stall, not break with an error reply.
	ctxd, cancel := context.WithTimeout(ctx, 2*time.Second)
	old, err := topo.DialContext(ctxd, "m1", "tcp", e1)
	cancel()
	if err != nil {
		t.Fatalf("dial before cut: %v", err)
	}
	defer old.Close()

	start := time.Now()
	if err := topo.CutRacks(ctx, "r1", "etcd"); err != nil {
		t.Fatalf("cut: %v", err)
	}
	t.Logf("cut r1 from etcd (%d routes) in %s", 2*len(topo.InRack("r1"))*len(topo.InRack("etcd")), time.Since(start).Round(time.Millisecond))
	if err := topo.CutRacks(ctx, "r1", "etcd"); err != nil {
		t.Fatalf("cutting twice must be a no-op: %v", err)
	}
	if err := reach(topo, "m1", e1); err == nil {
		t.Fatalf("m1 reached e1 through the partition")
	}
	_ = old.SetDeadline(time.Now().Add(500 * time.Millisecond))
	fmt.Fprintln(old, "lost")
	buf := make([]byte, 8)
	if n, err := old.Read(buf); err == nil {
		t.Fatalf("established connection got %q across the partition", buf[:n])
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("established connection must stall (timeout), got %v", err)
	}
	if err := reach(topo, "m2", e1); err != nil {
		t.Fatalf("m2 -> e1 must survive a cut of r1: %v", err)
	}
	if err := reach(topo, "m1", m2); err != nil {
		t.Fatalf("m1 -> m2 must survive a cut of r1 from etcd: %v", err)
	}
	cuts := topo.Cuts(ctx)
	if got := cuts["m1"]; len(got) != 3 || got[0] != "e1" || got[2] != "e3" {
		t.Fatalf("m1 cuts = %v, want e1 e2 e3", got)
	}
	if got := cuts["e2"]; len(got) != 1 || got[0] != "m1" {
		t.Fatalf("e2 cuts = %v, want m1", got)
	}

	if err := topo.Cut(ctx, []string{"m1"}, []string{"m2"}); err != nil {
		t.Fatalf("cut m1 m2: %v", err)
	}
	if err := reach(topo, "m1", m2); err == nil {
		t.Fatalf("m1 reached m2 through the partition")
	}
	if err := topo.Heal(ctx, []string{"m1"}, []string{"m2"}); err != nil {
		t.Fatalf("heal m1 m2: %v", err)
	}
	if err := reach(topo, "m1", m2); err != nil {
		t.Fatalf("after heal m1 -> m2: %v", err)
	}
	if err := reach(topo, "m1", e1); err == nil {
		t.Fatalf("healing m1-m2 must leave the etcd cut in place")
	}
	if err := topo.HealAll(ctx); err != nil {
		t.Fatalf("heal all: %v", err)
	}
	if err := reach(topo, "m1", e1); err != nil {
		t.Fatalf("after heal all m1 -> e1: %v", err)
	}
	if c := topo.Cuts(ctx); len(c) != 0 {
		t.Fatalf("faults left after HealAll: %v", c)
	}
}

func TestDownLeavesNothing(t *testing.T) {
	topo := newLab(t)
	ctx := context.Background()
	if err := topo.Down(ctx); err != nil {
		t.Fatalf("down: %v", err)
	}
	if ns, _ := Namespaces(topo.Prefix); len(ns) != 0 {
		t.Fatalf("namespaces left after down: %v", ns)
	}
	if err := topo.Down(ctx); err != nil {
		t.Fatalf("second down must be a no-op: %v", err)
	}
	// Up again after a down, as `kha-lab up` after `kha-lab down` does.
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	if ns, _ := Namespaces(topo.Prefix); len(ns) != len(topo.Hosts)+1 {
		t.Fatalf("namespaces after up = %v, want %d", ns, len(topo.Hosts)+1)
	}
}

// After Do, no thread of the process is left in a lab namespace.
func TestDoRestoresThreads(t *testing.T) {
	topo := newLab(t)
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for range 20 {
		go func() {
			done <- Do(topo.NetNSPath("m1"), func() error {
				ns, err := os.Readlink("/proc/thread-self/ns/net")
				if err == nil && ns == home {
					err = fmt.Errorf("Do ran fn in the host namespace")
				}
				time.Sleep(5 * time.Millisecond)
				return err
			})
		}()
	}
	for range 20 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// Visit many threads; each must be back home.
	res := make(chan string)
	for range 64 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ns, _ := os.Readlink("/proc/thread-self/ns/net")
			time.Sleep(2 * time.Millisecond)
			res <- ns
		}()
	}
	for range 64 {
		if ns := <-res; ns != home {
			t.Fatalf("a thread is still in namespace %s (home %s)", ns, home)
		}
	}
}

// Silence drops packets in the router without a word to either side: a
// connection attempt across it neither connects nor fails (a dead switch),
// where Cut fails it at once; hosts of one rack stay connected; Unsilence
// and HealAll each undo it.
func TestSilenceIsSilent(t *testing.T) {
	topo := newLab(t)
	ctx := context.Background()
	e1 := echo(t, topo, "e1")
	m2 := echo(t, topo, "m2")
	// The attempt must neither connect nor fail before its 300 ms are
	// up. Judged by the clock, not by dctx.Err(): the dial's own deadline
	// can fire a moment before the context's timer marks it done (seen on
	// a loaded CI machine: "i/o timeout" with dctx.Err() still nil).
	silentFor := func(from, addr string) error {
		start := time.Now()
		dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		c, err := topo.DialContext(dctx, from, "tcp", addr)
		if c != nil {
			c.Close()
		}
		if took := time.Since(start); err == nil || took < 250*time.Millisecond {
			return fmt.Errorf("%s -> %s ended after %v (before 300 ms) with %v", from, addr, took, err)
		}
		return nil
	}

	if err := topo.Cut(ctx, []string{"m1"}, []string{"e1"}); err != nil {
		t.Fatal(err)
	}
	if err := silentFor("m1", e1); err == nil {
		t.Fatal("behind Cut an attempt did not fail at once; the contrast this test draws is gone")
	}
	if err := topo.Heal(ctx, []string{"m1"}, []string{"e1"}); err != nil {
		t.Fatal(err)
	}

	if err := topo.Silence(ctx, []string{"m1"}, topo.InRack("etcd")); err != nil {
		t.Fatalf("silence: %v", err)
	}
	if err := silentFor("m1", e1); err != nil {
		t.Fatalf("silenced: %v", err)
	}
	if err := reach(topo, "m2", e1); err != nil {
		t.Fatalf("m2 -> e1 must survive m1's silence: %v", err)
	}
	if err := reach(topo, "m1", m2); err != nil {
		t.Fatalf("m1 -> m2 must survive a silence of m1 from etcd: %v", err)
	}
	if err := topo.Unsilence(ctx, []string{"m1"}, topo.InRack("etcd")); err != nil {
		t.Fatalf("unsilence: %v", err)
	}
	if err := reach(topo, "m1", e1); err != nil {
		t.Fatalf("after unsilence m1 -> e1: %v", err)
	}
	if err := topo.Unsilence(ctx, []string{"m1"}, topo.InRack("etcd")); err != nil {
		t.Fatalf("a second unsilence (every rule already gone) must succeed: %v", err)
	}

	if err := topo.Silence(ctx, []string{"m1"}, []string{"e1", "m2"}); err != nil {
		t.Fatal(err)
	}
	if err := topo.HealAll(ctx); err != nil {
		t.Fatalf("heal all: %v", err)
	}
	for _, addr := range []string{e1, m2} {
		if err := reach(topo, "m1", addr); err != nil {
			t.Fatalf("after heal all m1 -> %s: %v", addr, err)
		}
	}
}
