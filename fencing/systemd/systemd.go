package systemd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/cgroup"
)

// Units implements fencing.Units over systemd's D-Bus API.
//
// Rules it follows (design brief, section 6):
//   - The connection lives on the context given to New; each call gets
//     its own deadline from the caller's ctx.
//   - A job result only says the job ended. After every job the unit's
//     ActiveState is re-read; Start returns once it is "active", Stop once it
//     is "inactive" or "failed". Job results arrive on channels buffered for
//     one value (go-systemd sends while holding its listener lock and never
//     closes them), and every wait also polls the state, so a result lost with
//     a broken connection costs one poll interval, not the operation.
//   - When the bus connection breaks (dbus restarted) or systemd is briefly
//     off the bus (daemon-reexec), calls are retried, reconnecting as needed,
//     until the caller's ctx expires. A failure to read is always an error,
//     never a state: the supervisor must not mistake "cannot see" for
//     "stopped".
type Units struct {
	base     context.Context // lives as long as the Units; governs connections
	address  string          // "" = the system bus
	private  string          // systemd's private socket; "" = the bus only
	privConn func(ctx context.Context) (net.Conn, error)
	onBus    atomic.Bool // the current connection is the bus fallback
	log      *slog.Logger
	poll     time.Duration
	fileRoot string // Options.FileRoot

	// cgroups, when set, kills units' processes without systemd (KillDirect).
	cgroups *cgroup.FS
	groupMu sync.Mutex
	groups  map[string]string // unit -> ControlGroup as systemd last reported it

	// sem guards conn and serialises (re)connecting; a channel rather than
	// a mutex so waiting for it honours the caller's ctx.
	sem        chan struct{}
	conn       *sd.Conn
	connCancel context.CancelFunc
	lost       bool // the last connection broke; the next one is a reconnect
	closed     bool
}

var (
	_ fencing.Units         = (*Units)(nil)
	_ fencing.QueuedStarter = (*Units)(nil)
	_ fencing.DirectKiller  = (*Units)(nil)
	_ fencing.ExecReader    = (*Units)(nil)
	_ fencing.BindingReader = (*Units)(nil)
)

// PrivateSocket is systemd's private D-Bus socket, which systemctl itself
// uses: a direct connection to PID 1 with no dbus-daemon in between, so a
// stuck or restarting message bus cannot hold up a fence. Only root may use
// it.
const PrivateSocket = "/run/systemd/private"

// Options say how to reach systemd.
type Options struct {
	// Private is the path of systemd's private socket (PrivateSocket on
	// the host); "" uses the bus only. When it cannot be used (not root,
	// no such socket) the bus is the fallback, with a warning.
	Private string
	// PrivateConn, when set, opens the connection to Private instead of a
	// plain dial. systemd accepts only peers whose PID it can see (root in
	// its own PID namespace), so a test reaching a container's systemd
	// must connect from inside the container's PID namespace.
	PrivateConn func(ctx context.Context) (net.Conn, error)
	// Bus is a D-Bus address; "" is the host's system bus.
	Bus string
	// CgroupRoot is where the cgroup filesystem of this systemd is
	// mounted, as seen from here (cgroup.DefaultRoot on the host). ""
	// disables KillDirect, which then reports that it cannot confirm.
	CgroupRoot string
	// FileRoot is where this systemd's filesystem is seen from here ("",
	// as on the host: /): Bindings looks the units' ExecStartPre= programs
	// up under it.
	FileRoot string
	Log      *slog.Logger
}

// Host are the options for the host's own systemd, as the daemon
// runs: the private socket when root, the system bus otherwise, and the
// host's cgroups for direct kills.
func Host(logger *slog.Logger) Options {
	o := Options{CgroupRoot: cgroup.DefaultRoot, Log: logger}
	if os.Geteuid() == 0 {
		o.Private = PrivateSocket
	}
	return o
}

// New connects to systemd. ctx must live as long as the returned
// value: it governs the bus connection and every reconnection (go-systemd
// closes a connection when the context it was made with ends), so pass a
// long-lived one and bound calls with their own contexts. The first
// connection attempt is bounded to 10 s. address is a D-Bus address (for
// example "unix:path=/proc/123/root/run/dbus/system_bus_socket" to reach a
// container's systemd); "" means the host's system bus. logger may be nil
// (slog.Default()).
func New(ctx context.Context, address string, logger *slog.Logger) (*Units, error) {
	return Open(ctx, Options{Bus: address, Log: logger})
}

// Open is New with every option (see Options).
func Open(ctx context.Context, o Options) (*Units, error) {
	logger := o.Log
	if logger == nil {
		logger = slog.Default()
	}
	s := &Units{
		base:     ctx,
		address:  o.Bus,
		private:  o.Private,
		privConn: o.PrivateConn,
		log:      logger.With("component", "systemd"),
		poll:     100 * time.Millisecond,
		sem:      make(chan struct{}, 1),
		groups:   map[string]string{},
		fileRoot: o.FileRoot,
	}
	if o.CgroupRoot != "" {
		s.cgroups = &cgroup.FS{Root: o.CgroupRoot}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.get(cctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes the bus connection; later calls fail.
func (s *Units) Close() {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.closed = true
	s.dropLocked()
}

// get returns a live connection, dialling one if there is none.
func (s *Units) get(ctx context.Context) (*sd.Conn, error) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.sem }()
	if s.closed {
		return nil, errors.New("systemd: connection closed")
	}
	if s.conn != nil && s.conn.Connected() {
		return s.conn, nil
	}
	if s.conn != nil {
		s.lost = true // noticed here rather than by a failed call
		s.dropLocked()
	}
	conn, cancel, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("systemd: connect to %s: %w", s.busName(), err)
	}
	s.conn, s.connCancel = conn, cancel
	if s.lost {
		s.lost = false
		s.log.Warn("reconnected to systemd", "bus", s.busName())
	}
	return conn, nil
}

// drop discards conn if it is still the current connection.
func (s *Units) drop(conn *sd.Conn) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.conn == conn {
		s.lost = true
		s.dropLocked()
	}
}

func (s *Units) dropLocked() {
	if s.conn != nil {
		s.conn.Close()
		s.connCancel()
		s.conn, s.connCancel = nil, nil
	}
}

func (s *Units) busName() string {
	if s.private != "" && !s.onBus.Load() {
		return s.private
	}
	if s.address == "" {
		return "system bus"
	}
	return s.address
}

// dial opens a go-systemd connection (two bus connections: calls and
// signals), as go-systemd's NewSystemConnectionContext does, but to
// s.address. Authentication and Hello have no deadline of their own, so the
// connection gets a context of its own, cancelled (which closes the socket
// and unblocks them) when ctx expires first.
func (s *Units) dial(ctx context.Context) (*sd.Conn, context.CancelFunc, error) {
	cctx, cancel := context.WithCancel(s.base)
	type result struct {
		conn *sd.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		conn, err := s.dialPrivate(cctx)
		if err != nil {
			conn, err = sd.NewConnection(func() (*godbus.Conn, error) { return s.dialBus(cctx) })
		}
		ch <- result{conn, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			cancel()
			return nil, nil, r.err
		}
		return r.conn, cancel, nil
	case <-ctx.Done():
		cancel()
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, nil, ctx.Err()
	}
}

// dialPrivate connects straight to PID 1 over its private socket, as
// go-systemd's NewSystemdConnectionContext does (authentication, no Hello:
// there is no bus), but to s.private, which may be a container's. A failure
// means the bus fallback, said once per switch.
func (s *Units) dialPrivate(ctx context.Context) (*sd.Conn, error) {
	if s.private == "" {
		return nil, errors.New("no private socket configured")
	}
	conn, err := sd.NewConnection(func() (*godbus.Conn, error) {
		var c *godbus.Conn
		var err error
		if s.privConn != nil {
			var nc net.Conn
			if nc, err = s.privConn(ctx); err == nil {
				c, err = godbus.NewConn(nc, godbus.WithContext(ctx))
			}
		} else {
			c, err = godbus.Dial("unix:path="+s.private, godbus.WithContext(ctx))
		}
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, fmt.Errorf("auth: %w", err)
		}
		return c, nil
	})
	if err != nil {
		if !s.onBus.Swap(true) {
			s.log.Warn("cannot use systemd's private socket; talking to systemd through the D-Bus daemon instead", "socket", s.private, "err", err)
		}
		return nil, err
	}
	if s.onBus.Swap(false) {
		s.log.Info("talking to systemd over its private socket again", "socket", s.private)
	}
	return conn, nil
}

func (s *Units) dialBus(ctx context.Context) (*godbus.Conn, error) {
	var conn *godbus.Conn
	var err error
	if s.address == "" {
		conn, err = godbus.SystemBusPrivate(godbus.WithContext(ctx))
	} else {
		conn, err = godbus.Dial(s.address, godbus.WithContext(ctx))
	}
	if err != nil {
		return nil, err
	}
	// EXTERNAL with the numeric uid, like go-systemd: no user name lookup.
	if err := conn.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("auth: %w", err)
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	return conn, nil
}

// do runs f on a live connection. A broken connection is replaced and a
// transient error (systemd off the bus during daemon-reexec) is retried,
// until ctx expires. Any other error is systemd's answer and returned.
func (s *Units) do(ctx context.Context, op string, f func(*sd.Conn) error) error {
	backoff := 50 * time.Millisecond
	var last error
	for {
		conn, err := s.get(ctx)
		if err == nil {
			err = f(conn)
			if err == nil {
				return nil
			}
			broken := !conn.Connected() || isDisconnect(err)
			if !broken && !isTransient(err) {
				return err
			}
			if broken {
				s.log.Warn("systemd bus connection lost; reconnecting", "op", op, "err", err)
				s.drop(conn)
			} else {
				s.log.Warn("systemd unavailable on the bus; retrying", "op", op, "err", err)
			}
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		if ctx.Err() != nil {
			break
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
	if last == nil || errors.Is(last, ctx.Err()) {
		return ctx.Err()
	}
	return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
}

// isDisconnect reports errors that mean the bus connection is gone.
func isDisconnect(err error) bool {
	// A context deadline or cancellation is the caller's timeout, not a
	// broken bus (Go counts context.DeadlineExceeded as a net.Error): a
	// slow answer under load must not make us drop a good connection.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.Is(err, godbus.ErrClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.As(err, &ne) ||
		dbusErrorName(err) == "org.freedesktop.DBus.Error.Disconnected"
}

// isTransient reports bus errors that mean systemd is momentarily not on
// the bus (daemon-reexec, a restart of dbus in progress) or not answering.
func isTransient(err error) bool {
	switch n := dbusErrorName(err); {
	case n == "org.freedesktop.DBus.Error.NoReply",
		n == "org.freedesktop.DBus.Error.ServiceUnknown",
		n == "org.freedesktop.DBus.Error.NameHasNoOwner",
		n == "org.freedesktop.DBus.Error.TimedOut",
		n == "org.freedesktop.DBus.Error.Timeout",
		strings.HasPrefix(n, "org.freedesktop.DBus.Error.Spawn."):
		return true
	}
	return false
}

func dbusErrorName(err error) string {
	var de godbus.Error
	if errors.As(err, &de) {
		return de.Name
	}
	var dp *godbus.Error
	if errors.As(err, &dp) && dp != nil {
		return dp.Name
	}
	return ""
}

const (
	errNoSuchUnit    = "org.freedesktop.systemd1.NoSuchUnit"
	errNoSuchProcess = "org.freedesktop.systemd1.NoSuchProcess"
	// A job in mode "fail" that would reverse a pending one.
	errTransactionIsDestructive = "org.freedesktop.systemd1.TransactionIsDestructive"
)

// Start implements fencing.Units: a start job (mode "fail"), then ActiveState
// re-read until it is "active". Mode "fail" because the job must never
// cancel a pending stop: an operator's `systemctl stop kha-supervisor` stops
// the units bound to it first, while the supervisor still runs, and a start
// it issued then in mode "replace" cancelled that stop (fencing.ErrStopPending). A job that ends other than "done", or a
// "done" job that leaves the unit inactive or failed (a skipped condition, a
// process that exited at once), is an error.
func (s *Units) Start(ctx context.Context, unit string) error {
	return s.StartQueued(ctx, unit, nil)
}

// StartQueued implements fencing.QueuedStarter: Start, calling queued (when
// not nil) once systemd has queued the start job.
func (s *Units) StartQueued(ctx context.Context, unit string, queued func()) error {
	start := time.Now()
	var ch chan string
	err := s.do(ctx, "start "+unit, func(c *sd.Conn) error {
		// Clear a failed state and, with it, the start-rate counter: guard
		// refusals on this node while it was standby (an operator retrying
		// `systemctl start`) count towards StartLimitBurst and would
		// otherwise make this legitimate start fail with start-limit-hit.
		// The unit may simply not be failed: that error is not ours.
		_ = c.ResetFailedUnitContext(ctx, unit)
		ch = make(chan string, 1) // fresh per attempt: a dead connection never delivers
		_, err := c.StartUnitContext(ctx, unit, "fail", ch)
		return err
	})
	if dbusErrorName(err) == errTransactionIsDestructive {
		return fmt.Errorf("systemd: start %s: %w (%v)", unit, fencing.ErrStopPending, err)
	}
	if err != nil {
		return fmt.Errorf("systemd: start %s: %w", unit, err)
	}
	if queued != nil {
		queued()
	}
	st, err := s.awaitJob(ctx, unit, ch, func(st fencing.UnitState, result string) (bool, error) {
		switch {
		case st.ActiveState == "active":
			return true, nil
		case result == "":
			return false, nil
		case result != "done":
			return false, fmt.Errorf("start job %s; unit is %s/%s", result, st.ActiveState, st.SubState)
		case !st.Running():
			return false, fmt.Errorf("start job done but unit is %s/%s", st.ActiveState, st.SubState)
		}
		return false, nil // activating: Type=notify/forking/oneshot still starting
	})
	if err != nil {
		return fmt.Errorf("systemd: start %s: %w", unit, err)
	}
	s.noteGroup(ctx, unit)
	s.log.Debug("unit started", "unit", unit, "sub_state", st.SubState, "took", time.Since(start))
	return nil
}

// Stop implements fencing.Units: a stop job, then ActiveState re-read until it is
// "inactive" or "failed". The job is queued "replace-irreversibly": a
// start requested while it runs (an operator, a BindsTo= dependency) is
// refused rather than cancelling the stop. A unit systemd does not know is
// stopped (it cannot run).
func (s *Units) Stop(ctx context.Context, unit string) error {
	start := time.Now()
	var ch chan string
	err := s.do(ctx, "stop "+unit, func(c *sd.Conn) error {
		ch = make(chan string, 1)
		_, err := c.StopUnitContext(ctx, unit, "replace-irreversibly", ch)
		return err
	})
	if err != nil && dbusErrorName(err) != errNoSuchUnit {
		return fmt.Errorf("systemd: stop %s: %w", unit, err)
	}
	if err != nil {
		ch = nil // no job; the state read below confirms it is not running
	}
	st, err := s.awaitJob(ctx, unit, ch, func(st fencing.UnitState, result string) (bool, error) {
		if !st.Running() {
			return true, nil
		}
		if result != "" && result != "done" {
			return false, fmt.Errorf("stop job %s; unit is %s/%s", result, st.ActiveState, st.SubState)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("systemd: stop %s: %w", unit, err)
	}
	s.log.Debug("unit stopped", "unit", unit, "active_state", st.ActiveState, "took", time.Since(start))
	return nil
}

// awaitJob waits until check accepts the unit's state. check sees the job
// result once it arrived ("" before). The state is re-read when the result
// arrives and every poll interval, so a lost result (broken connection)
// does not stall the wait.
func (s *Units) awaitJob(ctx context.Context, unit string, ch <-chan string, check func(fencing.UnitState, string) (bool, error)) (fencing.UnitState, error) {
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	result := ""
	var last fencing.UnitState
	var lastErr error
	for {
		sts, err := s.states(ctx, []string{unit}, false)
		if err == nil {
			last, lastErr = sts[0], nil
			ok, cerr := check(last, result)
			if ok || cerr != nil {
				return last, cerr
			}
		} else {
			lastErr = err
		}
		select {
		case r := <-ch:
			result, ch = r, nil
		case <-tick.C:
		case <-ctx.Done():
			if lastErr != nil {
				return last, fmt.Errorf("%w (job result %q; state unreadable: %v)", ctx.Err(), result, lastErr)
			}
			return last, fmt.Errorf("%w (job result %q; unit is %s/%s)", ctx.Err(), result, last.ActiveState, last.SubState)
		}
	}
}

// Kill implements fencing.Units: SIGKILL to every process of the unit. A unit
// without processes, or unknown to systemd, has nothing to kill.
func (s *Units) Kill(ctx context.Context, unit string) error {
	err := s.do(ctx, "kill "+unit, func(c *sd.Conn) error {
		return c.KillUnitWithTarget(ctx, unit, sd.All, int32(syscall.SIGKILL))
	})
	switch dbusErrorName(err) {
	case errNoSuchUnit, errNoSuchProcess:
		s.log.Debug("nothing to kill", "unit", unit, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("systemd: kill %s: %w", unit, err)
	}
	s.log.Info("sent SIGKILL to unit", "unit", unit)
	return nil
}

// States implements fencing.Units with one ListUnitsByNames call (a unit systemd
// does not know is reported inactive, which is systemd's own answer) plus
// NRestarts of each loaded service.
func (s *Units) States(ctx context.Context, units []string) ([]fencing.UnitState, error) {
	return s.states(ctx, units, true)
}

func (s *Units) states(ctx context.Context, units []string, restarts bool) ([]fencing.UnitState, error) {
	var list []sd.UnitStatus
	err := s.do(ctx, "list units", func(c *sd.Conn) error {
		var err error
		list, err = c.ListUnitsByNamesContext(ctx, units)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("systemd: read unit states: %w", err)
	}
	byName := make(map[string]sd.UnitStatus, len(list))
	for _, u := range list {
		byName[u.Name] = u
	}
	out := make([]fencing.UnitState, 0, len(units))
	for _, name := range units {
		u, ok := byName[name]
		if !ok {
			// Never guess: a unit missing from the answer is unknown, not stopped.
			return nil, fmt.Errorf("systemd: read unit states: %s missing from ListUnitsByNames answer", name)
		}
		st := fencing.UnitState{Name: name, ActiveState: u.ActiveState, SubState: u.SubState}
		if restarts && st.Running() && s.cgroups != nil && s.group(name) == "" {
			s.noteGroup(ctx, name) // while the bus works: a fence may need it when it does not
		}
		if restarts && u.LoadState == "loaded" && strings.HasSuffix(name, ".service") {
			n, err := s.nRestarts(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("systemd: read NRestarts of %s: %w", name, err)
			}
			st.NRestarts = n
		}
		out = append(out, st)
	}
	return out, nil
}

func (s *Units) nRestarts(ctx context.Context, unit string) (uint32, error) {
	var p *sd.Property
	err := s.do(ctx, "NRestarts "+unit, func(c *sd.Conn) error {
		var err error
		p, err = c.GetServicePropertyContext(ctx, unit, "NRestarts")
		return err
	})
	if err != nil {
		return 0, err
	}
	n, ok := p.Value.Value().(uint32)
	if !ok {
		return 0, fmt.Errorf("NRestarts has type %s, want uint32", p.Value.Signature())
	}
	return n, nil
}

// noteGroup reads unit's ControlGroup and remembers it for KillDirect. A
// failure is only logged: the group is a fallback's input, not a state.
func (s *Units) noteGroup(ctx context.Context, unit string) {
	if s.cgroups == nil {
		return
	}
	typ := unitType(unit)
	if typ == "" {
		return
	}
	var p *sd.Property
	err := s.do(ctx, "ControlGroup "+unit, func(c *sd.Conn) error {
		var err error
		p, err = c.GetUnitTypePropertyContext(ctx, unit, typ, "ControlGroup")
		return err
	})
	if err != nil {
		s.log.Debug("cannot read ControlGroup", "unit", unit, "err", err)
		return
	}
	if g, ok := p.Value.Value().(string); ok && g != "" {
		s.groupMu.Lock()
		s.groups[unit] = g
		s.groupMu.Unlock()
	}
}

func (s *Units) group(unit string) string {
	s.groupMu.Lock()
	defer s.groupMu.Unlock()
	return s.groups[unit]
}

// unitType is the D-Bus interface suffix of units with a control group.
func unitType(unit string) string {
	i := strings.LastIndexByte(unit, '.')
	if i < 0 {
		return ""
	}
	switch t := unit[i+1:]; t {
	case "service", "socket", "scope", "slice", "mount", "swap":
		return strings.ToUpper(t[:1]) + t[1:]
	}
	return ""
}

// KillDirect implements fencing.DirectKiller: SIGKILL to every process in the
// unit's control group, read from the cgroup filesystem, until a read finds
// none. The group is the one systemd reported while the unit ran (read at
// start and when first seen running); a unit never seen running gets its
// default place in system.slice, and then only an existing, empty group
// counts as confirmation: an absent directory could be a wrong guess.
func (s *Units) KillDirect(ctx context.Context, unit string) error {
	if s.cgroups == nil {
		return errors.New("systemd: direct kill not configured (no cgroup root)")
	}
	g, known := s.group(unit), true
	if g == "" {
		g, known = "/system.slice/"+unit, false
	}
	if !known {
		if _, err := os.Stat(filepath.Join(s.cgroups.Root, "systemd", g)); err != nil {
			if _, err2 := os.Stat(filepath.Join(s.cgroups.Root, g)); err2 != nil {
				return fmt.Errorf("systemd: %s: control group never read and %s not found: cannot confirm", unit, g)
			}
		}
	}
	if err := s.cgroups.Kill(ctx, g); err != nil {
		return fmt.Errorf("systemd: direct kill of %s: %w", unit, err)
	}
	s.log.Warn("unit confirmed without processes from its control group, without systemd (SIGKILL sent to any left)", "unit", unit, "cgroup", g)
	return nil
}

var _ fencing.StopReader = (*Units)(nil)

// Stopped implements fencing.StopReader from the unit's control group (the
// one systemd reported while the unit ran, else its default place in
// system.slice): see cgroup.FS.Stopped. It asks systemd nothing, so a busy
// service manager cannot delay a probe's verdict.
func (s *Units) Stopped(unit string) (bool, error) {
	if s.cgroups == nil {
		return false, errors.New("systemd: no cgroup root to read")
	}
	g := s.group(unit)
	if g == "" {
		// Never read from systemd: its default place, if it is there. A
		// unit in another slice must not read as "not stopped" for ever.
		g = "/system.slice/" + unit
		if ok, err := s.cgroups.Exists(g); err != nil || !ok {
			return false, fmt.Errorf("systemd: %s: control group never read and %s not found (%v)", unit, g, err)
		}
	}
	st, err := s.cgroups.Stopped(g)
	if err != nil {
		return false, fmt.Errorf("systemd: %s: %w", unit, err)
	}
	return st, nil
}

// Executables implements fencing.ExecReader from each service's ExecStart property
// (D-Bus type a(sasbttttuii): the first field is the executable's path).
func (s *Units) Executables(ctx context.Context, units []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, unit := range units {
		var p *sd.Property
		err := s.do(ctx, "ExecStart "+unit, func(c *sd.Conn) error {
			var err error
			p, err = c.GetServicePropertyContext(ctx, unit, "ExecStart")
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("systemd: read ExecStart of %s: %w", unit, err)
		}
		paths, err := execPaths(p.Value)
		if err != nil {
			return nil, fmt.Errorf("systemd: ExecStart of %s: %w", unit, err)
		}
		out[unit] = paths
	}
	return out, nil
}

func execPaths(v godbus.Variant) ([]string, error) {
	lines, ok := v.Value().([][]any)
	if !ok {
		return nil, fmt.Errorf("has type %s, want a(sasbttttuii)", v.Signature())
	}
	var out []string
	for _, l := range lines {
		if len(l) == 0 {
			continue
		}
		if path, ok := l[0].(string); ok && path != "" {
			out = append(out, path)
		}
	}
	return out, nil
}

// properties reads a unit's properties: its unit properties when typ is
// "", else those of its type ("Service"). The one place the bindings and
// the installed-unit reader (unitread.go) ask systemd.
func (s *Units) properties(ctx context.Context, unit, typ string) (map[string]any, error) {
	var props map[string]any
	err := s.do(ctx, "properties "+unit, func(c *sd.Conn) error {
		var err error
		if typ == "" {
			props, err = c.GetUnitPropertiesContext(ctx, unit)
		} else {
			props, err = c.GetUnitTypePropertiesContext(ctx, unit, typ)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("systemd: read properties of %s: %w", unit, err)
	}
	return props, nil
}

// execLines reads ExecStartPre= as systemd reports it over D-Bus (path,
// argv, ignore_errors, ...): the argv of each line whose failure fails the
// start ("-" lines, whose failure systemd ignores, cannot guard anything),
// and the programs among them that are not installed or not executable.
func execLines(root string, lines [][]any) (argvs [][]string, missing []string) {
	for _, l := range lines {
		if len(l) < 2 {
			continue
		}
		argv, ok := l[1].([]string)
		if !ok {
			continue
		}
		if len(l) >= 3 {
			if ignore, _ := l[2].(bool); ignore {
				continue
			}
		}
		if p, ok := l[0].(string); ok && len(argv) > 0 {
			argv = append([]string{p}, argv[1:]...)
		}
		if len(argv) == 0 {
			continue
		}
		argvs = append(argvs, argv)
		if fi, err := os.Stat(filepath.Join("/", root, argv[0])); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, argv[0])
		}
	}
	return argvs, missing
}

// Bindings implements fencing.BindingReader: BindsTo, After, ExecStartPre,
// TimeoutStopUSec, KillMode and SendSIGKILL of each unit, as loaded.
func (s *Units) Bindings(ctx context.Context, units []string) (map[string]fencing.Binding, error) {
	out := map[string]fencing.Binding{}
	for _, unit := range units {
		up, err := s.properties(ctx, unit, "")
		if err != nil {
			return nil, err
		}
		sp, err := s.properties(ctx, unit, "Service")
		if err != nil {
			return nil, err
		}
		b := fencing.Binding{Unit: unit}
		b.BindsTo, _ = up["BindsTo"].([]string)
		b.After, _ = up["After"].([]string)
		b.KillMode, _ = sp["KillMode"].(string)
		b.SendSIGKILL, _ = sp["SendSIGKILL"].(bool)
		if us, ok := sp["TimeoutStopUSec"].(uint64); ok {
			b.TimeoutStop = usecDuration(us) // 0: infinity
		}
		if lines, ok := sp["ExecStartPre"].([][]any); ok {
			b.ExecStartPre, b.Missing = execLines(s.fileRoot, lines)
		}
		out[unit] = b
	}
	return out, nil
}
