package supervisor

import (
	"context"
	"fmt"
)

// notify queues an sd_notify message for the notifier goroutine. It never
// blocks: while systemd does not read its notify socket (daemon-reexec under
// load) a datagram write blocks once the socket's queue is full, and the
// loop must keep its fence clock running meanwhile. Watchdog pings are the
// ones dropped when the queue backs up; a reexec that long is covered by
// systemd re-arming the watchdog when it comes back.
func (s *Supervisor) notify(msg string) {
	if s.opts.Notify == nil {
		return
	}
	if msg == "WATCHDOG=1" && len(s.notes) > cap(s.notes)/2 {
		return
	}
	select {
	case s.notes <- msg:
	default:
		s.log.Warn("sd_notify queue full; message dropped", "msg", msg)
	}
}

// notifier delivers queued sd_notify messages in order.
func (s *Supervisor) notifier(bg context.Context) {
	for {
		select {
		case <-bg.Done():
			return
		case msg := <-s.notes:
			s.opts.Notify(msg)
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
		"KHA_ROLE":          string(s.state),
		"KHA_FENCING_TOKEN": fmt.Sprint(token),
	}
}
