package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// statusEvery is how often STATUS= is refreshed while nothing changes, so
// that the lease time left `systemctl status` shows is at most this old.
const statusEvery = 2 * time.Second

// statusNote is what STATUS= last said, as the loop sent it.
type statusNote struct {
	key string // the facts behind the line, without the moving lease time
	at  time.Time
}

// statusKey is what the status line says apart from the lease time left:
// when it changes (a new leader seen from a standby, a new token), STATUS=
// must follow at once.
func (s *Supervisor) statusKey() string {
	return fmt.Sprint(s.loop.state, "|", s.term.token, "|", s.loop.leader.Node, "|", s.loop.leader.Token, "|", s.loop.reason)
}

// refreshStatus sends STATUS= when the facts behind it changed, and every
// statusEvery anyway (the lease time left moves). Called by the loop on
// every pass.
func (s *Supervisor) refreshStatus(now time.Time) {
	if last := s.notes.last; s.statusKey() == last.key && now.Sub(last.at) < statusEvery {
		return
	}
	s.notify("STATUS=" + s.statusLine())
}

// notify queues an sd_notify message for the notifier goroutine (loop
// goroutine).
func (s *Supervisor) notify(msg string) {
	if !s.notes.on() {
		return
	}
	if strings.HasPrefix(msg, "STATUS=") {
		// Whoever sent it (a transition or the refresh), the next refresh
		// counts from now.
		s.notes.last = statusNote{key: s.statusKey(), at: s.now()}
	}
	s.notes.queue(note{msg: msg})
}

// pingWatchdog feeds systemd's watchdog from the loop with a ping that keeps
// its promise (fencing.Window): while this node holds a term, only up to the
// term's PingBy, and the ping carries that instant so that the notifier
// drops it rather than send it late.
func (s *Supervisor) pingWatchdog() {
	if !s.loop.state.Holding() {
		s.notes.queue(note{msg: "WATCHDOG=1"})
		return
	}
	by, ok := s.term.deadline.PingBy()
	if !ok || !s.term.deadline.MayPing(time.Now()) {
		return
	}
	s.notes.queue(note{msg: "WATCHDOG=1", by: by})
}

// notifier owns the sd_notify queue: the loop queues, its own goroutine
// (run) delivers in order, so that a notify socket nobody reads never
// blocks the loop.
type notifier struct {
	send  func(string) // Options.Notify; nil: no notifications
	log   *slog.Logger
	notes chan note
	last  statusNote // what STATUS= last said (loop-owned)
}

// note is one queued sd_notify message. A watchdog ping may carry by, the
// last instant at which it keeps its promise (Deadline.PingBy): the
// notifier drops it after that instead of sending it late.
type note struct {
	msg string
	by  time.Time
}

func newNotifier(send func(string), log *slog.Logger) notifier {
	return notifier{send: send, log: log, notes: make(chan note, 32)}
}

func (n *notifier) on() bool { return n.send != nil }

// queue never blocks: while systemd does not read its notify socket
// (daemon-reexec under load) a datagram write blocks once the socket's
// queue is full, and the loop must keep its fence clock running meanwhile.
// Watchdog pings are the ones dropped when the queue backs up; a reexec
// that long is covered by systemd re-arming the watchdog when it comes back.
func (n *notifier) queue(m note) {
	if !n.on() {
		return
	}
	if m.msg == "WATCHDOG=1" && len(n.notes) > cap(n.notes)/2 {
		return
	}
	select {
	case n.notes <- m:
	default:
		n.log.Warn("sd_notify queue full; message dropped", "msg", m.msg)
	}
}

// run delivers queued sd_notify messages in order until bg ends.
func (n *notifier) run(bg context.Context) {
	for {
		select {
		case <-bg.Done():
			return
		case m := <-n.notes:
			if !m.by.IsZero() && time.Now().After(m.by) {
				continue // a ping that could no longer keep its promise
			}
			n.send(m.msg)
		}
	}
}

func (s *Supervisor) runHook(ctx context.Context, name string, token int64) {
	if s.opts.Hook == nil {
		return
	}
	if err := s.opts.Hook(ctx, name, s.hookEnv(token)); err != nil {
		s.log.Warn("hook failed", "hook", name, "err", err)
	}
}

func (s *Supervisor) hookEnv(token int64) map[string]string {
	return map[string]string{
		"KHA_NODE":          s.cfg.Node,
		"KHA_CLUSTER":       s.cfg.Cluster,
		"KHA_ROLE":          string(s.loop.state),
		"KHA_FENCING_TOKEN": fmt.Sprint(token),
	}
}
