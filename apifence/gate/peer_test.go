package gate

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// The decision: a process is the unit's when a component of its cgroup
// path is the unit's name (systemd names each unit's cgroup after it).
func TestInUnit(t *testing.T) {
	v2 := []string{"/system.slice/kube-scheduler.service"}
	sub := []string{"/system.slice/kube-scheduler.service/sub"}
	other := []string{"/user.slice/user-0.slice/session-3.scope"}
	pod := []string{"/kubepods.slice/kubepods-burstable.slice/cri-containerd-1.scope"}
	lookalike := []string{"/system.slice/kube-scheduler.service-copy.scope"}
	for _, c := range []struct {
		name  string
		paths []string
		want  bool
	}{
		{"the unit (cgroup v2)", v2, true},
		{"a sub-cgroup of the unit (Delegate=yes)", sub, true},
		{"a login shell", other, false},
		{"a static pod", pod, false},
		{"a name that merely starts alike", lookalike, false},
	} {
		if got := InUnit(c.paths, "kube-scheduler.service"); got != c.want {
			t.Errorf("%s (%v): %v, want %v", c.name, c.paths, got, c.want)
		}
	}
}

// countingPeers admits or refuses every connection and counts the checks.
type countingPeers struct {
	admit bool
	n     atomic.Int64
}

func (c *countingPeers) Check(string, net.Addr, net.Addr) (Peer, error) {
	c.n.Add(1)
	p := Peer{PID: 4242, Cmdline: "kube-scheduler --kubeconfig=/etc/kubernetes/scheduler.conf", Cgroup: "/user.slice/session-9.scope"}
	if !c.admit {
		return p, ErrStranger
	}
	return p, nil
}

// One check per connection, not per request: HTTP/2 carries every
// request of a component over one long-lived connection.
func TestGateChecksTheProcessOncePerConnection(t *testing.T) {
	peers := &countingPeers{admit: true}
	f := newFixture(t, func(c *Config) { c.Peers = peers })
	c := f.client(t, f.cluster, "system:kube-scheduler")
	for range 5 {
		if resp, body := do(t, c, "GET", f.gate.URL()+"/api/v1/pods", nil); resp.StatusCode != 200 || resp.ProtoMajor != 2 {
			t.Fatalf("%s %s: %s", resp.Proto, resp.Status, body)
		}
	}
	if n := peers.n.Load(); n != 1 {
		t.Errorf("%d process checks for 5 requests on one connection, want 1", n)
	}
}

// A stranger (right certificate, wrong process) gets 403 naming the rule,
// nothing reaches the apiserver, and the gate logs an ERROR naming its PID
// and command line and tells OnStranger.
func TestGateRefusesAProcessOutsideItsUnit(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	var told []Peer
	f := newFixture(t, func(c *Config) {
		c.Peers = &countingPeers{}
		c.Log = slog.New(slog.NewTextHandler(&logs, nil))
		c.OnStranger = func(p Peer, _ error) { mu.Lock(); told = append(told, p); mu.Unlock() }
	})
	resp, body := do(t, f.client(t, f.cluster, "system:kube-scheduler"), "POST", f.gate.URL()+"/api/v1/namespaces/default/pods/p/binding", nil)
	if resp.StatusCode != 403 || !strings.Contains(body, "does not run in the gated unit") || !strings.Contains(body, "PID 4242") {
		t.Fatalf("%s: %s; want 403 naming the process", resp.Status, body)
	}
	if h := f.up.seen(); h != nil {
		t.Errorf("the request reached the apiserver: %v", h)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "pid=4242") || !strings.Contains(l, "kube-scheduler --kubeconfig") {
		t.Errorf("log lacks an ERROR with the PID and command line:\n%s", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0].PID != 4242 || f.gate.Refused() != 1 {
		t.Errorf("OnStranger heard %v, Refused() = %d; want the one process", told, f.gate.Refused())
	}
}

// The real path: sock_diag names the cgroup the client's socket was
// opened in, the cgroup2 hierarchy its path. Two shells in two cgroups: the
// one in a cgroup named like the unit is admitted, the other (a "scope" as
// a login session's) refused and named by PID and command line; this test
// process, elsewhere again, is refused too.
func TestProcPeersTellsProcessesInAndOutsideTheUnit(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "bash")
	root := cgroup2Root(t)
	unit := fmt.Sprintf("kha-gate-test-%d.service", os.Getpid())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sh, in := connectFrom(t, ln, filepath.Join(root, unit))
	// The decision reads nothing of the other process: an empty /proc
	// (as a supervisor without CAP_SYS_PTRACE sees a root component's fd
	// table) changes nothing.
	blind := ProcPeers{Proc: t.TempDir(), Cgroups: root}
	start := time.Now()
	p, err := blind.Check(unit, in.RemoteAddr(), in.LocalAddr())
	took := time.Since(start)
	if err != nil || p.Cgroup != "/"+unit {
		t.Fatalf("the unit's shell (PID %d): %v, %v; want admitted in cgroup /%s", sh, p, err, unit)
	}
	t.Logf("admitted PID %d's connection (cgroup %s) in %s without reading /proc", sh, p.Cgroup, took)
	start = time.Now()
	if _, err = (ProcPeers{}).Check(unit, in.RemoteAddr(), in.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted again in %s (cgroup2 mount from mountinfo)", time.Since(start))

	scope := fmt.Sprintf("kha-gate-stranger-%d.scope", os.Getpid())
	other, out := connectFrom(t, ln, filepath.Join(root, scope))
	p, err = ProcPeers{}.Check(unit, out.RemoteAddr(), out.LocalAddr())
	if err != ErrStranger || p.Cgroup != "/"+scope || p.PID != other || !strings.Contains(p.Cmdline, "bash") {
		t.Fatalf("the other shell: %v, %v; want ErrStranger naming PID %d (bash) in /%s", p, err, other, scope)
	}
	t.Logf("refused %s", p)

	mine, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	self := accept(t, ln)
	p, err = ProcPeers{}.Check(unit, self.RemoteAddr(), self.LocalAddr())
	if err != ErrStranger || p.Cgroup != ownCgroup(t) {
		t.Fatalf("this test process: %v, %v; want ErrStranger in cgroup %s", p, err, ownCgroup(t))
	}
	t.Logf("refused this test process: %s", p)
}

// connectFrom starts a shell in cgroup dir (created) that connects to ln
// and waits; it returns the shell's PID and the accepted connection.
func connectFrom(t *testing.T, ln net.Listener, dir string) (int, net.Conn) {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// The shell joins the cgroup, then connects, then waits (a builtin:
	// no child shares the socket).
	sh := exec.Command("bash", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && exec 3<>/dev/tcp/127.0.0.1/%d && read -t 30 -u 3", dir, port))
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sh.Process.Kill()
		_ = sh.Wait()
		_ = os.Remove(dir)
	})
	return sh.Process.Pid, accept(t, ln)
}

// ownCgroup is this process's cgroup v2 path.
func ownCgroup(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return ""
}

func accept(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	select {
	case c := <-ch:
		if c == nil {
			t.FailNow()
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	case <-time.After(20 * time.Second):
		t.Fatal("no connection")
	}
	return nil
}

// cgroup2Root is where the unified hierarchy is mounted.
func cgroup2Root(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if pre, post, ok := strings.Cut(l, " - "); ok && strings.HasPrefix(post, "cgroup2 ") {
			if f := strings.Fields(pre); len(f) > 4 {
				return f[4]
			}
		}
	}
	t.Fatal("no cgroup2 hierarchy mounted")
	return ""
}
