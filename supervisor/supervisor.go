// Package supervisor runs one member of an active/standby group: it wins the
// election key in etcd, only then starts the managed units, proves its lease
// with renewals it times itself, and fences (stop, SIGKILL, exit) before any
// other member could win. docs/architecture.md explains the argument.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// Options are a Supervisor's collaborators, injected so tests can run two
// members in one process against a real etcd with in-memory units.
type Options struct {
	Config  config.Config
	Client  *clientv3.Client
	Units   fencing.Units
	Log     *slog.Logger
	Version string

	// Notify receives sd_notify payloads ("READY=1", "STATUS=...",
	// "WATCHDOG=1", "STOPPING=1"). Nil means no notifications.
	Notify func(string)
	// Hook runs a configured hook (name is on_promote, on_demote or
	// on_fence). Nil means no hooks. An on_promote error aborts the
	// promotion when the config says so.
	Hook func(ctx context.Context, name string, env map[string]string) error
	// FencingEnv is the file the units' drop-in reads the term's token
	// from (hooks.FencingEnvPath in the daemon): written on promotion
	// before on_promote runs and before any unit starts, removed once a
	// demotion or a fence has the units down. Empty: none.
	FencingEnv string
	// Observer is told of every transition (metrics, history). May be nil.
	Observer func(Transition)
	// Pool, when set, carries every request that decides or observes
	// leadership (grants, campaign, renewals, election-key and record
	// reads and writes, watches): one client per etcd endpoint, so that a
	// member without a raft leader or a silent one cannot hold them up (see
	// etcdconn.Pool). Nil means a pool of Client alone. Client still serves
	// the history.
	Pool *etcdconn.Pool
	// Watchdog is systemd's WatchdogSec (from WATCHDOG_USEC) when the unit
	// kills with WatchdogSignal=SIGKILL; it enters the fence window (see
	// fencing.Window). Zero without a watchdog.
	Watchdog time.Duration
	// RenewObserver is told of every renewal attempt (metrics): the lease,
	// the etcd endpoint whose answer counted ("" when none did), the round
	// trip and the error. May be nil; called from the renewal goroutine.
	RenewObserver func(lease, endpoint string, took time.Duration, err error)
	// APIFence is the fence at the API server (apifence.go); nil is off.
	APIFence APIFence
	// RunStateDir is where this process leaves what a restarted successor
	// needs to give back its leases at once (runstate.DefaultDir in the
	// daemon). Empty: nothing is kept, and a successor waits them out.
	RunStateDir string
	// Clock is the loop's time of day (see Clock: the fence clock is not
	// on it). Nil means the real clock.
	Clock Clock
	// ResetConnections destroys this host's connections to etcd
	// (etcd.reset_on_fence; connreset.Reset in the daemon). A fence calls
	// it once the units are confirmed down, before it tells anyone: what
	// the node's apiserver had queued for etcd on the fenced components'
	// behalf is discarded, never delivered when a partition heals. It
	// returns how many connections it destroyed. Nil: none.
	ResetConnections func() (int, error)
	// ResetConnectionsTo destroys this host's connections to the given
	// etcd endpoints (etcd.reset_silent). While this node holds the
	// election key, silentWatch (silent.go) calls it with the endpoints
	// that stopped answering: the node's kube-apiserver keeps sending part
	// of the components' requests over established connections to a
	// member a partition took away or that stalls, until its TCP user
	// timeout or keepalive. Nil: none.
	ResetConnectionsTo func(endpoints []string) (int, error)
}

// Transition is one change of state, with its reason.
type Transition struct {
	Node   string
	From   group.State
	To     group.State
	Kind   string // short, fixed vocabulary: a metrics label (elected, deadline, key_lost, ...)
	Reason string // for people: may carry node names and tokens
	Token  int64
	At     time.Time
}

// FenceError is returned by Run when the member fenced itself. The process
// must exit non-zero and never start units again; systemd restarts it as a
// fresh standby.
type FenceError struct {
	Reason string
	// Incomplete is non-nil when a unit could not be confirmed stopped.
	Incomplete error
}

func (e *FenceError) Error() string {
	if e.Incomplete != nil {
		return fmt.Sprintf("fenced (%s); units not confirmed stopped: %v", e.Reason, e.Incomplete)
	}
	return "fenced: " + e.Reason
}

// Supervisor is one member. Create with New, then call Run once.
//
// Each field's owner shows in its type: the first group is set by New and
// only read afterwards (any goroutine); loop-owned types are read and
// written by the loop goroutine only; the observers are small types that
// own their state and say in their own comment who may touch it.
type Supervisor struct {
	cfg     config.Config
	cli     *clientv3.Client
	pool    *etcdconn.Pool
	units   fencing.Units
	log     *slog.Logger
	opts    Options
	keys    group.Keys
	window  fencing.Window
	timeout fencing.Timeouts
	inc     string       // incarnation
	timing  *groupTiming // the other members' lease timings (grouptiming.go): owns its state

	leases   leases      // grant, keep-alive, revoke
	election electionKey // campaign, resign, read
	clock    Clock       // the loop's time of day (not the fence clock)

	seen  groupSeen // the group as last read (holder.go): loop-owned
	watch unitWatch // the managed units as last read (monitor.go): loop-owned
	jobs  jobSlot   // the one job at a time (jobs.go): loop-owned
	term  term      // the current term (term.go): loop-owned, published as a fencing.Term

	loop loopState // the lifecycle's own state (below): loop-owned

	// Observers and outlets, each with its own goroutine or lock.
	rec            recordWriter // how our record reaches etcd (publish.go)
	history        *historian   // the group history's writer (history.go)
	notes          notifier     // sd_notify (notify.go)
	badTransitions atomic.Int64 // transitions not in the lifecycle table (state.go); tests assert zero
	dropins        dropinWatch  // the units' bindings as last checked (dropins.go)
	health         *health.Set  // the units' health probes, armed on the leader only (monitor.go); nil: none
	silent         *silentWatch // resets connections to silent etcd members while we hold (silent.go)
	etcdFence      *etcdFence   // etcd_fence: the old master's apiserver cut off at etcd (etcdfence.go); nil when off

	in inbox // the channels into the loop

	kept keptState // what a restarted successor reads (incarnation.go)

	snap statusSnap // the loop's copy of itself for other goroutines (status.go)
}

// loopState is the lifecycle's own state: only the loop goroutine reads or
// writes it (other goroutines see it through statusSnap and the Term).
type loopState struct {
	state         group.State
	prevState     group.State // the state before the last transition
	reason        string      // why we are in state
	since         time.Time   // when we entered it
	memberLease   clientv3.LeaseID
	leader        group.LeaderInfo // the election key's holder as last seen
	cooldown      time.Time
	overriding    bool      // the last campaign decision overrode our cooldown
	overrideNoted time.Time // the cooldown whose override was reported
	shutting      bool
	retryAt       time.Time // earliest next start-up attempt after a failure
	fenceTimer    *time.Timer
	pingTimer     *time.Timer // under a backstop: the term's last ping (Deadline.PingBy)
	stopRenew     map[string]context.CancelFunc
	renewStreaks  map[string]*renewStreak // per lease: its current run of failed renewals (renewlog.go; made at the first)
	fenceNow      string                  // set by a handler that saw the lease lost: fence at once
	fenceKind     string                  // short label for fenceNow (metrics)
}

// inbox is the channels into the loop: the observer goroutines and the
// jobs send, only the loop receives.
type inbox struct {
	renewals chan renewal
	leaders  chan leaderObs
	unitObs  chan unitObs
	jobDone  chan jobEnd
}

func newInbox() inbox {
	return inbox{renewals: make(chan renewal, 4), leaders: make(chan leaderObs, 1),
		unitObs: make(chan unitObs, 1), jobDone: make(chan jobEnd, 1)}
}

// New checks the options and returns a Supervisor ready to Run.
func New(o Options) (*Supervisor, error) {
	if o.Client == nil || o.Units == nil {
		return nil, errors.New("supervisor: Client and Units are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	c := o.Config
	w := c.Window()
	w.Watchdog = o.Watchdog
	if err := w.Validate(c.Lease.RenewInterval); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	if o.Pool == nil {
		p, err := etcdconn.NewPool([]*clientv3.Client{o.Client}, etcdconn.PoolOptions{Log: o.Log})
		if err != nil {
			return nil, fmt.Errorf("supervisor: %w", err)
		}
		o.Pool = p
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	s := &Supervisor{
		cfg: c, cli: o.Client, clock: o.Clock, pool: o.Pool, units: o.Units, opts: o,
		log:     o.Log.With("node", c.Node, "cluster", c.Cluster),
		keys:    group.NewKeys(c.Etcd.Prefix, c.Cluster),
		window:  w,
		timeout: c.Timeouts(),
		inc:     group.NewID(),
		timing:  newGroupTiming(w.TTL, w.StopMax+w.Slack),
		loop:    loopState{state: group.Starting, stopRenew: map[string]context.CancelFunc{}, since: o.Clock.Now()},
		in:      newInbox(),
		watch:   unitWatch{restarts: map[string]uint32{}, startPre: map[string]time.Time{}},
		rec:     recordWriter{wake: make(chan struct{}, 1)},
	}
	s.term.deadline = fencing.NewDeadline(w)
	s.notes = newNotifier(o.Notify, s.log)
	s.history = &historian{queue: make(chan group.Event, 64), cli: o.Client, keys: s.keys, retain: c.History.Retain,
		timeout: s.opTimeout(), retry: c.Units.PollInterval, log: s.log}
	// Grants, campaigns and revokes get opTimeout; renewals (startRenewer)
	// request_timeout.
	s.leases = leases{pool: o.Pool, timeout: s.opTimeout(), log: s.log}
	s.election = electionKey{leases: s.leases, keys: s.keys, node: c.Node, timeout: s.opTimeout()}
	hs, err := newHealthSet(c, s.units)
	if err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	s.health = hs
	if s.etcdFence, err = newEtcdFence(c, s.pool, s.keys, s.log); err != nil {
		return nil, fmt.Errorf("supervisor: %w", err)
	}
	s.silent = &silentWatch{pool: s.pool, reset: o.ResetConnectionsTo, every: max(time.Second, s.cfg.Lease.RenewInterval),
		timeout: s.opTimeout(), log: s.log}
	if o.RunStateDir != "" {
		s.kept.store = &runstate.Store{Dir: o.RunStateDir}
		s.kept.pred = s.loadPredecessor()
	}
	s.snap.st = Status{Node: c.Node, Cluster: c.Cluster, State: group.Starting, StopMax: s.timeout.StopMax()}
	return s, nil
}

// Keys returns the member's etcd key layout.
func (s *Supervisor) Keys() group.Keys { return s.keys }

// tickEvery is how often the loop wakes with nothing to do: it pings the
// watchdog, so it must be well under WatchdogSec (see tickFor).
const tickEvery = 250 * time.Millisecond

// tickFor is the loop's tick under watchdog w (0: none): tickEvery, or a
// fifth of w when that is shorter, so that a healthy loop pings at least
// four times per WatchdogSec whatever the profile ("fast-kill"'s
// WatchdogSec=500ms gives 100 ms, "fast"'s 750ms 150 ms).
func tickFor(w time.Duration) time.Duration {
	if w > 0 && w/5 < tickEvery {
		return max(w/5, 10*time.Millisecond)
	}
	return tickEvery
}

// blockFor bounds a wait the loop makes without pinging (the start gate's
// closeWait) to at most d and, under a watchdog, to half of WatchdogSec
// less one tick, so that a healthy loop is never killed for it.
func (s *Supervisor) blockFor(d time.Duration) time.Duration {
	if w := s.window.Watchdog; w > 0 {
		return max(min(d, w/2-tickFor(w)), 10*time.Millisecond)
	}
	return d
}

// Run is the lifecycle loop. It returns nil after a graceful stop (ctx
// cancelled: units stopped, lease released), a *FenceError after fencing,
// or another error if start-up failed before anything was held.
func (s *Supervisor) Run(ctx context.Context) error {
	// Background work lives until Run returns, independent of ctx, because
	// a graceful stop still needs etcd and systemd after ctx is cancelled.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer s.history.flush()
	defer stopBG()
	defer s.silent.stop()
	defer func() {
		for _, c := range s.loop.stopRenew {
			c()
		}
	}()

	s.loop.fenceTimer = time.NewTimer(time.Hour)
	s.loop.fenceTimer.Stop()
	s.loop.pingTimer = time.NewTimer(time.Hour)
	s.loop.pingTimer.Stop()
	tick := time.NewTicker(tickFor(s.window.Watchdog))
	defer tick.Stop()

	go s.observeLeader(bg)
	go s.observeUnits(bg)
	go s.publisher(bg)
	go s.notes.run(bg)
	go s.history.run(bg)
	go s.watchPeers(bg)
	go s.scanStrays(bg)
	go s.checkDropins(bg)
	go s.etcdFence.keepClear(bg, max(time.Second, s.cfg.Lease.RenewInterval), s.standbyUnitsDown, s.termMayAct)

	done := ctx.Done()
	for {
		select {
		case <-done:
			done = nil
			s.loop.shutting = true
			s.notify("STOPPING=1")
			s.log.Info("shutdown requested", "state", s.loop.state)
			if err, exit := s.onShutdown(bg); exit {
				return err
			}
		case <-tick.C:
		case r := <-s.in.renewals:
			s.onRenewal(r)
		case o := <-s.in.leaders:
			s.onLeader(o)
		case o := <-s.in.unitObs:
			s.onUnits(bg, o)
		case r := <-s.in.jobDone:
			if err, exit := s.onJobDone(bg, r); exit {
				return err
			}
		case <-s.loop.fenceTimer.C:
			// handled by the deadline check below
		case <-s.loop.pingTimer.C:
			// the last ping the term allows, at the end of this pass
		}
		if s.loop.state.Holding() && s.term.deadline.Expired(deadlineNow()) {
			s.drainRenewals()
		}
		if s.loop.state.Holding() && s.term.deadline.Expired(deadlineNow()) {
			return s.fenceNoted(bg, "deadline", "renewal deadline passed: lease can no longer be proven")
		}
		if s.loop.fenceNow != "" {
			return s.fenceNoted(bg, s.loop.fenceKind, s.loop.fenceNow)
		}
		s.step(bg)
		s.updateSnapshot()
		s.refreshStatus(s.now())
		s.pingWatchdog()
	}
}
