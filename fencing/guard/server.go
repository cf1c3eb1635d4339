package guard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

// DefaultSocket is where the supervisor listens unless the configuration
// says otherwise (config key guard.socket).
const DefaultSocket = layout.GuardSocket

// DefaultTimeout bounds one connection, request and answer together. The
// guard runs on every unit start, so a wedged peer must not hold it long.
const DefaultTimeout = 2 * time.Second

// maxRequest bounds one request line; a guard request is a few dozen bytes.
const maxRequest = 16 << 10

// HandlerFunc answers one op. req is the request's "args" (JSON null when
// absent); the returned value is marshalled into the answer's "result".
// ctx expires with the connection's deadline.
type HandlerFunc func(ctx context.Context, req json.RawMessage) (any, error)

// request and response are the wire format: one JSON line each way.
type request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

type response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Args are the "guard" op's arguments.
type Args struct {
	Unit string `json:"unit"`
}

// Server answers on the guard socket. Create it with Listen, give it a status
// source with SetStatus, add ops with Handle, then run Serve.
type Server struct {
	// Logger receives one record per refusal (an operator's audit trail of
	// starts that were blocked) and per protocol error. Default slog.Default().
	Logger *slog.Logger
	// Timeout bounds each connection. Default DefaultTimeout.
	Timeout time.Duration

	path string
	ln   *net.UnixListener

	mu       sync.RWMutex
	status   func() Status
	handlers map[string]HandlerFunc

	closeOnce sync.Once
	wg        sync.WaitGroup
}

// Listen creates the socket at path: the parent directory is created with
// mode 0700 when missing, the socket gets mode 0600. A stale socket file left
// by a dead supervisor is removed; a socket on which a live process answers
// is not, and Listen fails instead, so two supervisors never share a node.
func Listen(path string) (*Server, error) {
	if path == "" {
		return nil, errors.New("guard socket: empty path")
	}
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("guard socket: listen on %s: %w", path, err)
	}
	// The socket is created with the process umask; tighten it before the
	// first Accept. The 0700 directory (when we made it) and the peer
	// credential check cover the instant in between.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("guard socket: chmod %s: %w", path, err)
	}
	s := &Server{path: path, ln: ln, handlers: map[string]HandlerFunc{}}
	s.handlers["guard"] = s.guardOp
	return s, nil
}

// ensureDir creates dir 0700, or checks that an existing one cannot be
// written by others (who could otherwise replace the socket with their own).
func ensureDir(dir string) error {
	err := os.Mkdir(dir, 0o700)
	switch {
	case err == nil:
		// Mkdir applies the umask, which can only remove bits; be exact.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("guard socket: chmod directory %s: %w", dir, err)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("guard socket: create %s: %w", filepath.Dir(dir), err)
		}
		return ensureDir(dir)
	case !errors.Is(err, fs.ErrExist):
		return fmt.Errorf("guard socket: create directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("guard socket: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("guard socket: %s exists and is not a directory", dir)
	}
	if m := fi.Mode(); m&0o022 != 0 && m&fs.ModeSticky == 0 {
		return fmt.Errorf("guard socket: directory %s is writable by group or others (mode %s); refusing to put the root-only socket there", dir, m.Perm())
	}
	return nil
}

// removeStale removes a socket file nobody answers on. It never removes a
// file that is not a socket, and refuses when a live process answers.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("guard socket: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("guard socket: %s exists and is not a socket (mode %s); refusing to remove it", path, fi.Mode())
	}
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("guard socket: another process is serving %s (is a second kha-supervisor running?)", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) {
		// Anything else (a full backlog shows up as EAGAIN) may be a live
		// but busy server: do not take its socket away.
		return fmt.Errorf("guard socket: cannot tell whether %s is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("guard socket: remove stale %s: %w", path, err)
	}
	return nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// SetStatus installs the status source the "guard" op decides from. Until it
// is set, every start is refused ("the supervisor is starting").
func (s *Server) SetStatus(fn func() Status) {
	s.mu.Lock()
	s.status = fn
	s.mu.Unlock()
}

// SetTerm makes the supervisor's published term the status source: every
// request decides from the term as it is then (StatusOf).
func (s *Server) SetTerm(fn func() fencing.Term) {
	s.SetStatus(func() Status { return StatusOf(fn(), time.Now()) })
}

// Handle adds (or replaces) the handler for op. It may be called while
// Serve runs.
func (s *Server) Handle(op string, h HandlerFunc) {
	s.mu.Lock()
	s.handlers[op] = h
	s.mu.Unlock()
}

// Serve accepts connections until ctx is done or Close is called, then
// closes the socket (removing its file) and waits for the connections in
// flight. It returns nil after a cancellation or Close.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	defer s.wg.Wait()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and friends: back off briefly instead of spinning.
			s.logger().Warn("guard socket: accept failed", "path", s.path, "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(ctx, c)
		}()
	}
}

// Close stops accepting and removes the socket file. Connections in flight
// finish within their deadline.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.ln.Close() })
	return err
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) timeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

func (s *Server) serveConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	deadline := time.Now().Add(s.timeout())
	_ = c.SetReadDeadline(deadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	resp := s.answer(ctx, c)
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(response{Error: "kha-supervisor: cannot encode answer: " + err.Error()})
	}
	// The answer gets its own deadline so that a client whose request timed
	// out still learns why.
	_ = c.SetWriteDeadline(time.Now().Add(s.timeout()))
	if _, err := c.Write(append(b, '\n')); err != nil {
		s.logger().Debug("guard socket: write answer", "err", err)
		return
	}
	// Closing a unix socket with unread input resets the peer before it can
	// read the answer (an oversized request); signal the end of the answer
	// and swallow what is left, briefly.
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

func (s *Server) answer(ctx context.Context, c *net.UnixConn) response {
	// The request is read before the caller is checked, so that a refused
	// caller's write does not fail and it gets to read why it was refused.
	// Nothing in it is acted on before the check. A line ends at '\n'; a
	// client that half-closes after its request without one is accepted too.
	line, err := bufio.NewReader(io.LimitReader(c, maxRequest)).ReadBytes('\n')
	cred, cerr := peerCred(c)
	if cerr != nil {
		s.logger().Warn("guard socket: cannot read peer credentials", "err", cerr)
		return response{Error: "kha-supervisor: cannot verify the caller: " + cerr.Error()}
	}
	if err := checkPeer(cred); err != nil {
		s.logger().Warn("guard socket: refused non-root caller", "uid", cred.Uid, "pid", cred.Pid)
		return response{Error: err.Error()}
	}
	switch {
	case errors.Is(err, io.EOF) && len(line) >= maxRequest:
		return response{Error: "kha-supervisor: request too long"}
	case errors.Is(err, io.EOF) && len(line) == 0:
		return response{Error: "kha-supervisor: empty request"}
	case err != nil && !errors.Is(err, io.EOF):
		return response{Error: "kha-supervisor: reading request: " + err.Error()}
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return response{Error: "kha-supervisor: malformed request: " + err.Error()}
	}
	s.mu.RLock()
	h := s.handlers[req.Op]
	s.mu.RUnlock()
	if h == nil {
		return response{Error: fmt.Sprintf("kha-supervisor: unknown op %q", req.Op)}
	}
	args := req.Args
	if len(args) == 0 {
		args = json.RawMessage("null")
	}
	v, err := h(ctx, args)
	if err != nil {
		return response{Error: err.Error()}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return response{Error: fmt.Sprintf("kha-supervisor: op %q: encode result: %v", req.Op, err)}
	}
	return response{OK: true, Result: b}
}

// guardOp is the built-in "guard" op.
func (s *Server) guardOp(_ context.Context, raw json.RawMessage) (any, error) {
	var args Args
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, fmt.Errorf("kha-supervisor: guard: malformed arguments: %w", err)
	}
	if err := validUnit(args.Unit); err != nil {
		return nil, err
	}
	s.mu.RLock()
	fn := s.status
	s.mu.RUnlock()
	var a Answer
	if fn == nil {
		a = Answer{Unit: args.Unit, Message: fmt.Sprintf(
			"kha-supervisor: refusing to start %s: the supervisor is starting and has no status yet", args.Unit)}
	} else {
		a = Decide(args.Unit, fn())
	}
	if !a.Allowed {
		s.logger().Info("guard refused a unit start", "unit", a.Unit, "state", a.Status.State,
			"leader", a.Status.Leader, "token", a.Status.Token, "lease_left", a.Status.LeaseLeft, "reason", a.Message)
	} else {
		s.logger().Debug("guard allowed a unit start", "unit", a.Unit, "token", a.Status.Token, "lease_left", a.Status.LeaseLeft)
	}
	return a, nil
}

// validUnit keeps the answer one printable line: systemd unit names are at
// most 255 bytes of a restricted alphabet, so anything else is a caller bug.
func validUnit(u string) error {
	if u == "" {
		return errors.New("kha-supervisor: guard: no unit named")
	}
	if len(u) > 255 {
		return errors.New("kha-supervisor: guard: unit name longer than 255 bytes")
	}
	for _, r := range u {
		if r < 0x21 || r == 0x7f {
			return fmt.Errorf("kha-supervisor: guard: unit name %q contains whitespace or control characters", u)
		}
	}
	return nil
}

// peerCred reads the connecting process's credentials, recorded by the
// kernel at connect() time, so they cannot be forged by the peer.
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("raw conn: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("raw conn control: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", credErr)
	}
	return cred, nil
}

// checkPeer admits root only: the answer reveals nothing secret, but the
// socket is the units' gate and later ops (status, drills) may act.
func checkPeer(cred *unix.Ucred) error {
	if cred == nil {
		return errors.New("kha-supervisor: guard socket: no peer credentials")
	}
	if cred.Uid != 0 {
		return fmt.Errorf("kha-supervisor: guard socket answers only root; caller uid %d (pid %d) refused", cred.Uid, cred.Pid)
	}
	return nil
}
