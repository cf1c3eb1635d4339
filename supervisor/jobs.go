package supervisor

import (
	"context"
	"time"
)

// A job is the one piece of slow work (etcd transactions, unit jobs) under
// way at a time. Jobs run in their own goroutine so the loop never blocks:
// it must keep watching the fence clock and pinging the watchdog.
type job struct {
	name   string
	cancel context.CancelFunc
}

type jobResult struct {
	name  string
	val   any
	err   error
	units unitObs // read after the job's last action
}

type pendingJob struct {
	name string
	fn   func(context.Context) (any, error)
}

func (s *Supervisor) start(bg context.Context, name string, fn func(context.Context) (any, error)) {
	ctx, cancel := context.WithCancel(bg)
	s.job = &job{name: name, cancel: cancel}
	go func() {
		v, err := fn(ctx)
		cancel()
		s.jobDone <- jobResult{name: name, val: v, err: err, units: s.readUnits(bg)}
	}()
}

// startAfter starts fn now, or as soon as the running job has ended.
func (s *Supervisor) startAfter(bg context.Context, name string, fn func(context.Context) (any, error)) {
	if s.job == nil {
		s.start(bg, name, fn)
		return
	}
	s.pending = &pendingJob{name: name, fn: fn}
}

// runPending starts a job queued by startAfter once the loop is idle.
func (s *Supervisor) runPending(bg context.Context) {
	if s.job == nil && s.pending != nil {
		p := s.pending
		s.pending = nil
		s.start(bg, p.name, p.fn)
	}
}

func (s *Supervisor) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Etcd.RequestTimeout.D())
}

// offer sends v on a one-slot channel, replacing an unread older value: the
// loop wants the latest observation, not a backlog. Only one goroutine may
// send on a given channel.
func offer[T any](ch chan T, v T) {
	for {
		select {
		case ch <- v:
			return
		default:
			select {
			case <-ch:
			default:
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
