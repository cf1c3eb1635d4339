package guard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// childEnv makes the test binary act as a guard client (see TestMain): the
// non-root peer test runs it as another uid.
const childEnv = "KHA_GUARD_TEST_CHILD_SOCKET"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	os.Exit(m.Run())
}

// childResult is what the child client prints on stdout.
type childResult struct {
	UID         int    `json:"uid"`
	Allowed     bool   `json:"allowed"`
	Err         string `json:"err"`
	Unreachable bool   `json:"unreachable"`
	ServerError bool   `json:"server_error"`
}

func runChild(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := Ask(ctx, path, "kube-scheduler.service")
	r := childResult{UID: os.Getuid(), Allowed: a.Allowed}
	if err != nil {
		var se *ServerError
		r.Err, r.Unreachable, r.ServerError = err.Error(), errors.Is(err, ErrUnreachable), errors.As(err, &se)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// statusBox is a concurrency-safe status source the tests can change.
type statusBox struct {
	mu sync.Mutex
	s  Status
}

func (b *statusBox) get() Status  { b.mu.Lock(); defer b.mu.Unlock(); return b.s }
func (b *statusBox) set(s Status) { b.mu.Lock(); b.s = s; b.mu.Unlock() }
func activeStatus(node string) Status {
	return Status{Node: node, Cluster: "c", State: "active", Leader: node, Token: 77,
		UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: 3 * time.Second}
}

// serve starts a server at path and stops it (and checks Serve's result)
// when the test ends.
func serve(t *testing.T, path string, box *statusBox, opts ...func(*Server)) *Server {
	t.Helper()
	srv, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	srv.Logger = quiet
	for _, o := range opts {
		o(srv)
	}
	if box != nil {
		srv.SetStatus(box.get)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve returned %v after cancel", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after cancel")
		}
	})
	return srv
}

func ask(t *testing.T, path, unit string) (Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return Ask(ctx, path, unit)
}

func sockPath(t *testing.T) string {
	return filepath.Join(t.TempDir(), "run", "guard.sock")
}

func TestAskAllowedAndRefused(t *testing.T) {
	path := sockPath(t)
	box := &statusBox{s: activeStatus("m1")}
	serve(t, path, box)

	a, err := ask(t, path, "kube-scheduler.service")
	if err != nil {
		t.Fatalf("Ask: %v", err)
	}
	if !a.Allowed || a.Unit != "kube-scheduler.service" || a.Status.Token != 77 {
		t.Fatalf("active node: got %+v, want allowed with token 77", a)
	}

	refusals := []struct {
		name string
		s    Status
		want string
	}{
		{"standby", Status{Node: "m2", State: "standby", Leader: "m1", Token: 1234, StopMax: 3 * time.Second},
			"kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 1234)"},
		{"low lease", func() Status { s := activeStatus("m1"); s.LeaseLeft = 1200 * time.Millisecond; return s }(),
			"lease has 1.2s left, under the 3s needed to stop it"},
		{"not allowed yet", func() Status { s := activeStatus("m1"); s.State = "promoting"; s.UnitsAllowed = false; return s }(),
			"this node is promoting and may not run units now"},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			box.set(r.s)
			a, err := ask(t, path, "kube-scheduler.service")
			if err != nil {
				t.Fatalf("Ask: %v", err)
			}
			if a.Allowed || !strings.Contains(a.Message, r.want) {
				t.Fatalf("got allowed=%v message %q, want a refusal containing %q", a.Allowed, a.Message, r.want)
			}
			if a.Status != r.s {
				t.Fatalf("answer status %+v, want %+v", a.Status, r.s)
			}
		})
	}
}

func TestNoStatusSourceRefuses(t *testing.T) {
	path := sockPath(t)
	serve(t, path, nil)
	a, err := ask(t, path, "kube-scheduler.service")
	if err != nil {
		t.Fatalf("Ask: %v", err)
	}
	if a.Allowed || !strings.Contains(a.Message, "has no status yet") {
		t.Fatalf("got %+v, want a refusal while the supervisor has no status", a)
	}
}

func TestModes(t *testing.T) {
	path := sockPath(t)
	serve(t, path, &statusBox{})
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if got := di.Mode().Perm(); got != 0o700 {
		t.Errorf("socket directory mode %o, want 700", got)
	}
	si, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if si.Mode().Type() != fs.ModeSocket {
		t.Errorf("%s is %s, not a socket", path, si.Mode())
	}
	if got := si.Mode().Perm(); got != 0o600 {
		t.Errorf("socket mode %o, want 600", got)
	}
}

func TestModesUnderPermissiveUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	path := sockPath(t)
	srv, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for p, want := range map[string]fs.FileMode{filepath.Dir(path): 0o700, path: 0o600} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode %o with umask 0, want %o", p, fi.Mode().Perm(), want)
		}
	}
}

func TestRefusesWritableDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(filepath.Join(dir, "guard.sock"))
	if err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("Listen in a 0777 directory: err %v, want a refusal", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Run("missing socket", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.sock")
		_, err := ask(t, path, "kube-scheduler.service")
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "not running or not reachable") {
			t.Fatalf("err %v, want ErrUnreachable", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		path := staleSocket(t)
		_, err := ask(t, path, "kube-scheduler.service")
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("err %v, want ErrUnreachable wrapping ECONNREFUSED", err)
		}
	})
	t.Run("no answer in time", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "mute.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		var held []net.Conn
		var mu sync.Mutex
		defer func() {
			mu.Lock()
			for _, c := range held {
				c.Close()
			}
			mu.Unlock()
		}()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, c) // accept, read nothing, never answer
				mu.Unlock()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err = Ask(ctx, path, "kube-scheduler.service")
		if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "no answer in time") {
			t.Fatalf("err %v, want ErrUnreachable (no answer in time)", err)
		}
	})
}

// staleSocket leaves a socket file behind with nobody listening, as a
// crashed supervisor would.
func staleSocket(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "guard.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket fixture missing: %v", err)
	}
	return path
}

func TestStaleSocketIsReplaced(t *testing.T) {
	path := staleSocket(t)
	serve(t, path, &statusBox{s: activeStatus("m1")})
	a, err := ask(t, path, "kube-scheduler.service")
	if err != nil || !a.Allowed {
		t.Fatalf("after replacing a stale socket: %+v, %v", a, err)
	}
}

func TestLiveSocketIsNotTaken(t *testing.T) {
	path := sockPath(t)
	box := &statusBox{s: activeStatus("m1")}
	serve(t, path, box)
	if srv, err := Listen(path); err == nil {
		srv.Close()
		t.Fatal("second Listen on a live socket succeeded")
	} else if !strings.Contains(err.Error(), "another process is serving") {
		t.Fatalf("second Listen: %v, want 'another process is serving'", err)
	}
	// The first server must be unharmed.
	if a, err := ask(t, path, "kube-scheduler.service"); err != nil || !a.Allowed {
		t.Fatalf("first server after a refused second Listen: %+v, %v", a, err)
	}
}

func TestNonSocketFileIsKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "guard.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
		t.Fatalf("regular file was touched: %q, %v", b, err)
	}
}

func TestServeRemovesSocketOnStop(t *testing.T) {
	path := sockPath(t)
	srv, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket file after Serve returned: %v, want gone", err)
	}
	if _, err := ask(t, path, "x.service"); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Ask after stop: %v, want ErrUnreachable", err)
	}
}

func TestCheckPeer(t *testing.T) {
	if err := checkPeer(&unix.Ucred{Pid: 1, Uid: 0, Gid: 0}); err != nil {
		t.Fatalf("root refused: %v", err)
	}
	for _, uid := range []uint32{1, 1000, 65534} {
		err := checkPeer(&unix.Ucred{Pid: 42, Uid: uid, Gid: 0})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", uid)) {
			t.Fatalf("uid %d: %v, want a refusal naming the uid", uid, err)
		}
	}
	if err := checkPeer(nil); err == nil {
		t.Fatal("nil credentials accepted")
	}
}

// TestNonRootPeer runs the test binary itself as uid 65534 against a real
// server. With the production modes the kernel already refuses the connect;
// with the modes opened up (as a misconfiguration would) the server's
// SO_PEERCRED check refuses.
func TestNonRootPeer(t *testing.T) {
	testenv.RequireRoot(t)
	// t.TempDir's parents are 0700; nobody needs a traversable directory of
	// its own, and a copy of the test binary it may execute.
	dir, err := os.MkdirTemp("", "kha-guard-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "guard.test")
	copyExecutable(t, exe)

	path := filepath.Join(dir, "guard.sock")
	serve(t, path, &statusBox{s: activeStatus("m1")})

	runAsNobody := func() childResult {
		t.Helper()
		cmd := exec.Command(exe)
		cmd.Env = []string{childEnv + "=" + path}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("child as uid 65534: %v (stdout %q)", err, out)
		}
		var r childResult
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("child output %q: %v", out, err)
		}
		if r.UID != 65534 {
			t.Fatalf("child ran as uid %d, want 65534", r.UID)
		}
		return r
	}

	t.Run("socket mode 0600", func(t *testing.T) {
		r := runAsNobody()
		if r.Allowed || !r.Unreachable || !strings.Contains(r.Err, "permission denied") {
			t.Fatalf("non-root client: %+v, want permission denied", r)
		}
	})
	t.Run("socket opened up, peer check", func(t *testing.T) {
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		r := runAsNobody()
		if r.Allowed || !r.ServerError || !strings.Contains(r.Err, "answers only root; caller uid 65534") {
			t.Fatalf("non-root client: %+v, want the server's SO_PEERCRED refusal", r)
		}
	})
}

func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	src, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentClients(t *testing.T) {
	path := sockPath(t)
	var calls atomic.Int64
	srv := serve(t, path, nil)
	// Odd calls see an active node, even calls a standby: every answer must
	// match the status it was decided from, whatever the interleaving.
	srv.SetStatus(func() Status {
		if calls.Add(1)%2 == 1 {
			return activeStatus("m1")
		}
		return Status{Node: "m1", State: "standby", Leader: "m2", Token: 9}
	})
	const clients, each = 32, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	var allowed, refused atomic.Int64
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unit := fmt.Sprintf("u%d.service", i)
			for range each {
				a, err := ask(t, path, unit)
				switch {
				case err != nil:
					errs <- err
				case a.Unit != unit:
					errs <- fmt.Errorf("asked for %s, answer is for %s", unit, a.Unit)
				case a.Allowed != (a.Status.State == "active"):
					errs <- fmt.Errorf("answer %+v does not match its status", a)
				case a.Allowed:
					allowed.Add(1)
				default:
					refused.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := allowed.Load() + refused.Load(); got != clients*each {
		t.Fatalf("%d good answers, want %d", got, clients*each)
	}
	if allowed.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("allowed %d, refused %d: both kinds expected", allowed.Load(), refused.Load())
	}
	if calls.Load() != clients*each {
		t.Fatalf("status source called %d times, want %d", calls.Load(), clients*each)
	}
}

func TestHandleAndProtocolErrors(t *testing.T) {
	path := sockPath(t)
	srv := serve(t, path, &statusBox{s: activeStatus("m1")})
	srv.Handle("echo", func(ctx context.Context, req json.RawMessage) (any, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("handler context has no deadline")
		}
		var v map[string]string
		if err := json.Unmarshal(req, &v); err != nil {
			return nil, err
		}
		return map[string]string{"echo": v["say"]}, nil
	})
	srv.Handle("fail", func(context.Context, json.RawMessage) (any, error) {
		return nil, errors.New("kha-supervisor: drill refused while frozen")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	var out map[string]string
	if err := Call(ctx, path, "echo", map[string]string{"say": "hi"}, &out); err != nil || out["echo"] != "hi" {
		t.Fatalf("echo: %v %v", out, err)
	}
	var se *ServerError
	if err := Call(ctx, path, "fail", nil, nil); !errors.As(err, &se) || se.Msg != "kha-supervisor: drill refused while frozen" {
		t.Fatalf("fail op: %v, want the handler's error as a ServerError", err)
	}
	if err := Call(ctx, path, "nosuch", nil, nil); !errors.As(err, &se) || !strings.Contains(se.Msg, `unknown op "nosuch"`) {
		t.Fatalf("unknown op: %v", err)
	}
	for _, unit := range []string{"", "a b.service", "x\n.service", strings.Repeat("u", 256)} {
		if _, err := Ask(ctx, path, unit); !errors.As(err, &se) {
			t.Fatalf("unit %q: %v, want a ServerError", unit, err)
		}
	}

	raw := func(line string) response {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.UnixConn).CloseWrite()
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		var r response
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return r
	}
	if r := raw("not json\n"); r.OK || !strings.Contains(r.Error, "malformed request") {
		t.Fatalf("garbage: %+v", r)
	}
	if r := raw(""); r.OK || !strings.Contains(r.Error, "empty request") {
		t.Fatalf("empty: %+v", r)
	}
	if r := raw(strings.Repeat("x", maxRequest+10)); r.OK || !strings.Contains(r.Error, "too long") {
		t.Fatalf("oversized: %+v", r)
	}
	// No trailing newline but a half-close: still one request.
	if r := raw(`{"op":"guard","args":{"unit":"kube-scheduler.service"}}`); !r.OK {
		t.Fatalf("request without newline: %+v", r)
	}
}

func TestSlowClientDoesNotBlockOthers(t *testing.T) {
	path := sockPath(t)
	serve(t, path, &statusBox{s: activeStatus("m1")}, func(s *Server) { s.Timeout = 500 * time.Millisecond })
	// A client that connects and says nothing holds its own goroutine only.
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a, err := ask(t, path, "kube-scheduler.service"); err != nil || !a.Allowed {
		t.Fatalf("second client while one is silent: %+v %v", a, err)
	}
	// The silent one is answered with an error once its deadline passes.
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var r response
	if err := json.Unmarshal(b, &r); err != nil || r.OK || !strings.Contains(r.Error, "reading request") {
		t.Fatalf("silent client got %q (%v), want a read-deadline error", b, err)
	}
}
