package fencing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// Systemd implements Units over systemd's D-Bus API.
//
// Rules it follows (design brief, section 6):
//   - The connection lives on the context given to NewSystemd; each call gets
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
type Systemd struct {
	base    context.Context // lives as long as the Systemd; governs connections
	address string          // "" = the system bus
	log     *slog.Logger
	poll    time.Duration

	// sem guards conn and serialises (re)connecting; a channel rather than
	// a mutex so waiting for it honours the caller's ctx.
	sem        chan struct{}
	conn       *sd.Conn
	connCancel context.CancelFunc
	lost       bool // the last connection broke; the next one is a reconnect
	closed     bool
}

var _ Units = (*Systemd)(nil)

// NewSystemd connects to systemd. ctx must live as long as the returned
// value: it governs the bus connection and every reconnection (go-systemd
// closes a connection when the context it was made with ends), so pass a
// long-lived one and bound calls with their own contexts. The first
// connection attempt is bounded to 10 s. address is a D-Bus address (for
// example "unix:path=/proc/123/root/run/dbus/system_bus_socket" to reach a
// container's systemd); "" means the host's system bus. logger may be nil
// (slog.Default()).
func NewSystemd(ctx context.Context, address string, logger *slog.Logger) (*Systemd, error) {
	if logger == nil {
		logger = slog.Default()
	}
	s := &Systemd{
		base:    ctx,
		address: address,
		log:     logger.With("component", "systemd"),
		poll:    100 * time.Millisecond,
		sem:     make(chan struct{}, 1),
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.get(cctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Close closes the bus connection; later calls fail.
func (s *Systemd) Close() {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	s.closed = true
	s.dropLocked()
}

// get returns a live connection, dialling one if there is none.
func (s *Systemd) get(ctx context.Context) (*sd.Conn, error) {
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
func (s *Systemd) drop(conn *sd.Conn) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.conn == conn {
		s.lost = true
		s.dropLocked()
	}
}

func (s *Systemd) dropLocked() {
	if s.conn != nil {
		s.conn.Close()
		s.connCancel()
		s.conn, s.connCancel = nil, nil
	}
}

func (s *Systemd) busName() string {
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
func (s *Systemd) dial(ctx context.Context) (*sd.Conn, context.CancelFunc, error) {
	cctx, cancel := context.WithCancel(s.base)
	type result struct {
		conn *sd.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		conn, err := sd.NewConnection(func() (*godbus.Conn, error) { return s.dialBus(cctx) })
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

func (s *Systemd) dialBus(ctx context.Context) (*godbus.Conn, error) {
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
func (s *Systemd) do(ctx context.Context, op string, f func(*sd.Conn) error) error {
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
)

// Start implements Units: a start job (mode "replace"), then ActiveState
// re-read until it is "active". A job that ends other than "done", or a
// "done" job that leaves the unit inactive or failed (a skipped condition, a
// process that exited at once), is an error.
func (s *Systemd) Start(ctx context.Context, unit string) error {
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
		_, err := c.StartUnitContext(ctx, unit, "replace", ch)
		return err
	})
	if err != nil {
		return fmt.Errorf("systemd: start %s: %w", unit, err)
	}
	st, err := s.awaitJob(ctx, unit, ch, func(st UnitState, result string) (bool, error) {
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
	s.log.Debug("unit started", "unit", unit, "sub_state", st.SubState, "took", time.Since(start))
	return nil
}

// Stop implements Units: a stop job, then ActiveState re-read until it is
// "inactive" or "failed". The job is queued "replace-irreversibly": a
// start requested while it runs (an operator, a BindsTo= dependency) is
// refused rather than cancelling the stop. A unit systemd does not know is
// stopped (it cannot run).
func (s *Systemd) Stop(ctx context.Context, unit string) error {
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
	st, err := s.awaitJob(ctx, unit, ch, func(st UnitState, result string) (bool, error) {
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
func (s *Systemd) awaitJob(ctx context.Context, unit string, ch <-chan string, check func(UnitState, string) (bool, error)) (UnitState, error) {
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	result := ""
	var last UnitState
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

// Kill implements Units: SIGKILL to every process of the unit. A unit
// without processes, or unknown to systemd, has nothing to kill.
func (s *Systemd) Kill(ctx context.Context, unit string) error {
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

// States implements Units with one ListUnitsByNames call (a unit systemd
// does not know is reported inactive, which is systemd's own answer) plus
// NRestarts of each loaded service.
func (s *Systemd) States(ctx context.Context, units []string) ([]UnitState, error) {
	return s.states(ctx, units, true)
}

func (s *Systemd) states(ctx context.Context, units []string, restarts bool) ([]UnitState, error) {
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
	out := make([]UnitState, 0, len(units))
	for _, name := range units {
		u, ok := byName[name]
		if !ok {
			// Never guess: a unit missing from the answer is unknown, not stopped.
			return nil, fmt.Errorf("systemd: read unit states: %s missing from ListUnitsByNames answer", name)
		}
		st := UnitState{Name: name, ActiveState: u.ActiveState, SubState: u.SubState}
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

func (s *Systemd) nRestarts(ctx context.Context, unit string) (uint32, error) {
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
