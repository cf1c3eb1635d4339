package supervisor

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// A job is the one piece of slow work (etcd transactions, unit jobs) under
// way at a time. Jobs run in their own goroutine so the loop never blocks:
// it must keep watching the fence clock and pinging the watchdog. Each job
// carries its own completion handler (a work value), typed by what its body
// returns; the loop runs that handler when the job ends.
type job struct {
	kind   jobKind
	cancel context.CancelFunc
}

// jobKind names a job (logs, tests) and says how a shutdown treats it.
type jobKind struct {
	name string
	// cancelOnShutdown: a SIGTERM cancels the job at once: a promotion, a
	// restart or a standby's enforcement, which the demotion or the leave
	// that follows makes moot. The others (the demotion's confirmed stop,
	// the etcd writes) must finish.
	cancelOnShutdown bool
}

var (
	jobStartup  = jobKind{name: "startup"}
	jobAcquire  = jobKind{name: "acquire"}
	jobPromote  = jobKind{name: "promote", cancelOnShutdown: true}
	jobRestart  = jobKind{name: "restart", cancelOnShutdown: true}
	jobEnforce  = jobKind{name: "enforce", cancelOnShutdown: true}
	jobClearKey = jobKind{name: "clear_key"}
	jobDemote   = jobKind{name: "demote"}
	jobLeave    = jobKind{name: "leave"}
)

// outcome is what a job's body produced, handed to its completion handler.
type outcome[T any] struct {
	val   T
	err   error
	units unitObs // read after the job's last action
}

// work is a job: its body, run in its own goroutine, and its completion
// handler, run by the loop. done's exit reports that Run must return err.
type work[T any] struct {
	kind jobKind
	run  func(context.Context) (T, error)
	done func(bg context.Context, o outcome[T]) (err error, exit bool)
}

// jobEnd is a finished job on its way to the loop: finish runs the job's
// completion handler on its outcome.
type jobEnd struct {
	kind   jobKind
	units  unitObs
	finish func(bg context.Context) (err error, exit bool)
}

// launch starts w now; the loop must be idle (s.jobs.cur == nil).
func launch[T any](s *Supervisor, bg context.Context, w work[T]) {
	ctx, cancel := context.WithCancel(bg)
	s.jobs.cur = &job{kind: w.kind, cancel: cancel}
	go func() {
		v, err := w.run(ctx)
		cancel()
		units := s.readUnits(bg)
		s.in.jobDone <- jobEnd{kind: w.kind, units: units, finish: func(bg context.Context) (error, bool) {
			return w.done(bg, outcome[T]{val: v, err: err, units: units})
		}}
	}()
}

// jobSlot is the loop's one job at a time: the running job, the one queued
// behind it, and when the last one ended (loop-owned).
type jobSlot struct {
	cur     *job       // nil: the loop is idle
	pending pendingJob // queued by launchAfter
	lastEnd time.Time  // unit observations started before it are stale
}

// pendingJob is a job queued by launchAfter: it launches it.
type pendingJob func(bg context.Context)

// launchAfter starts w now, or as soon as the running job has ended.
func launchAfter[T any](s *Supervisor, bg context.Context, w work[T]) {
	if s.jobs.cur == nil {
		launch(s, bg, w)
		return
	}
	s.jobs.pending = func(bg context.Context) { launch(s, bg, w) }
}

// runPending starts a job queued by launchAfter once the loop is idle.
func (s *Supervisor) runPending(bg context.Context) {
	if s.jobs.cur == nil && s.jobs.pending != nil {
		p := s.jobs.pending
		s.jobs.pending = nil
		p(bg)
	}
}

// noResult adapts a job body that returns only an error.
func noResult(fn func(context.Context) error) func(context.Context) (struct{}, error) {
	return func(ctx context.Context) (struct{}, error) { return struct{}{}, fn(ctx) }
}

// minOpTimeout is the least time an etcd request other than a renewal is
// given. etcd.request_timeout is sized for renewals (fast-kill's 250 ms keeps
// the renewal gap of an etcd election short); a record write, a barrier read
// or a replay that a loaded etcd answers in 300 ms is slow, not failed, and
// a promotion step that fails costs a cooldown.
const minOpTimeout = 500 * time.Millisecond

// opTimeout is the time an etcd request other than a renewal is given.
func (s *Supervisor) opTimeout() time.Duration { return opTimeoutOf(s.cfg) }

func opTimeoutOf(c config.Config) time.Duration { return max(minOpTimeout, c.Etcd.RequestTimeout) }

// reqCtx bounds one etcd request other than a renewal (opTimeout).
func (s *Supervisor) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout())
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
