package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
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

type grantResult struct {
	lease clientv3.LeaseID
	sent  time.Time
	ttl   time.Duration
	// crashed: a record of an earlier incarnation of this member was
	// still alive, so that incarnation ended without leaving the group.
	crashed bool
}

// startupJob reconciles (stops whatever managed unit runs: this process
// holds nothing yet), then registers the member record on a fresh lease.
func (s *Supervisor) startupJob(ctx context.Context) (any, error) {
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	if err != nil {
		return nil, fmt.Errorf("read managed units: %w", err)
	}
	if r := runningUnits(states); len(r) > 0 {
		s.log.Warn("start-up: managed units found running; stopping them before anything else", "units", r)
		if err := fencing.StopAll(ctx, s.units, s.cfg.Units.Managed, s.timeout); err != nil {
			return nil, fmt.Errorf("start-up reconcile: %w", err)
		}
	}
	s.unitsMayRun.Store(false)
	crashed := false
	for {
		g, err := s.grant(ctx)
		if err != nil {
			return nil, err
		}
		rec, _ := json.Marshal(s.record())
		key := s.keys.Member(s.cfg.Node)
		rctx, cancel := s.reqCtx(ctx)
		resp, err := s.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(rec), clientv3.WithLease(g.lease))).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err == nil && resp.Succeeded {
			g.crashed = crashed
			return g, nil
		}
		s.revoke(g.lease)
		if err != nil {
			return nil, fmt.Errorf("register member record: %w", err)
		}
		// A record under our name is alive: an earlier incarnation of this
		// process (killed, its lease not yet expired) or, if it never goes
		// away, another machine configured with the same node name.
		var other Record
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			_ = json.Unmarshal(kvs[0].Value, &other)
		}
		crashed = true
		s.log.Warn("a live member record already uses this node name; waiting for it to expire",
			"incarnation", other.Incarnation, "state", other.State, "hint", "if this persists, two machines share the node name")
		if err := sleep(ctx, s.cfg.Units.PollInterval.D()); err != nil {
			return nil, err
		}
	}
}

// grant creates a lease, recording when the request was sent: the proof of
// validity starts then, not when the answer arrived.
func (s *Supervisor) grant(ctx context.Context) (grantResult, error) {
	ttl := s.cfg.Lease.TTL.D()
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	sent := time.Now()
	resp, err := s.cli.Grant(rctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return grantResult{}, fmt.Errorf("grant lease: %w", err)
	}
	return grantResult{lease: resp.ID, sent: sent, ttl: time.Duration(resp.TTL) * time.Second}, nil
}

type acquireResult struct {
	won    bool
	lease  clientv3.LeaseID
	sent   time.Time
	ttl    time.Duration
	token  int64
	leader LeaderInfo
}

// acquireJob tries once to create the election key on a fresh lease. The
// transaction succeeds only if no key exists, so two members racing get
// exactly one winner. The winner re-reads the key to confirm it is still
// its own (same CreateRevision, same lease) before anything starts.
func (s *Supervisor) acquireJob(ctx context.Context) (any, error) {
	g, err := s.grant(ctx)
	if err != nil {
		return nil, err
	}
	key := s.keys.Leader()
	rctx, cancel := s.reqCtx(ctx)
	resp, err := s.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.cfg.Node, clientv3.WithLease(g.lease))).
		Else(clientv3.OpGet(key)).Commit()
	cancel()
	if err != nil {
		s.revoke(g.lease)
		return nil, fmt.Errorf("campaign: %w", err)
	}
	if !resp.Succeeded {
		s.revoke(g.lease)
		li := LeaderInfo{Revision: resp.Header.Revision}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
			li.Node, li.Token, li.Lease = string(kvs[0].Value), kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease)
		}
		return acquireResult{leader: li}, nil
	}
	token := resp.Header.Revision
	rctx, cancel = s.reqCtx(ctx)
	li, err := ReadLeader(rctx, s.cli, s.keys)
	cancel()
	if err != nil || li.Token != token || li.Lease != g.lease {
		s.revoke(g.lease)
		if err == nil {
			err = fmt.Errorf("election key changed right after winning it (token %d, now %d by %q)", token, li.Token, li.Node)
		}
		return nil, fmt.Errorf("verify election key: %w", err)
	}
	return acquireResult{won: true, lease: g.lease, sent: g.sent, ttl: g.ttl, token: token}, nil
}

// promoteJob runs the promotion barrier, then starts the units in order.
func (s *Supervisor) promoteJob(token int64) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		// Barrier: a member whose record says its units may run (its key
		// was deleted by hand, its lease revoked while it lived) must
		// report them stopped, or its record must expire, first.
		var last string
		for {
			rctx, cancel := s.reqCtx(ctx)
			recs, _, err := ReadMembers(rctx, s.cli, s.keys)
			cancel()
			if err == nil {
				b := blockers(recs, s.cfg.Node)
				if len(b) == 0 {
					break
				}
				if msg := fmt.Sprint(b); msg != last {
					s.log.Warn("promotion barrier: waiting for other members to report their units stopped", "members", b)
					last = msg
				}
			}
			if err := sleep(ctx, s.cfg.Units.PollInterval.D()/4); err != nil {
				return nil, err
			}
		}
		if d := s.cfg.Lease.TakeoverDelay.D(); d > 0 {
			s.log.Info("takeover delay", "delay", d)
			if err := sleep(ctx, d); err != nil {
				return nil, err
			}
		}
		// Say that units may run BEFORE the first one starts, and make sure
		// etcd has it: that is what the next leader's barrier reads.
		s.unitsMayRun.Store(true)
		if err := s.writeRecord(ctx, false); err != nil {
			return nil, fmt.Errorf("publish record before starting units: %w", err)
		}
		if s.opts.Hook != nil {
			if err := s.opts.Hook(ctx, "on_promote", s.hookEnv(token)); err != nil {
				if s.cfg.Hooks.AbortOnPromoteErr {
					return nil, fmt.Errorf("on_promote hook: %w", err)
				}
				s.log.Warn("on_promote hook failed; promoting anyway (abort_on_promote_failure = false)", "err", err)
			}
		}
		return nil, s.gate.do(func() error {
			return fencing.StartAll(ctx, s.units, s.cfg.Units.Managed, s.timeout)
		})
	}
}

// leaveJob ends the membership: the record goes with its lease.
func (s *Supervisor) leaveJob(lease clientv3.LeaseID) func(context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		if lease != 0 {
			s.revoke(lease)
		}
		return nil, nil
	}
}

// release gives up the election key (only if it is still ours) and its
// lease, so the next member can win at once instead of after the TTL.
func (s *Supervisor) release(ctx context.Context, token int64, lease clientv3.LeaseID) {
	if token == 0 {
		return
	}
	key := s.keys.Leader()
	rctx, cancel := s.reqCtx(ctx)
	_, err := s.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).
		Then(clientv3.OpDelete(key)).Commit()
	cancel()
	if err != nil {
		s.log.Warn("release election key", "err", err)
	}
	s.revoke(lease)
}

func (s *Supervisor) revoke(lease clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Etcd.RequestTimeout.D())
	defer cancel()
	if _, err := s.cli.Revoke(ctx, lease); err != nil {
		s.log.Debug("revoke lease", "lease", fmt.Sprintf("%x", lease), "err", err)
	}
}

func (s *Supervisor) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Etcd.RequestTimeout.D())
}

// record builds this member's record from the latest snapshot.
func (s *Supervisor) record() Record {
	st := s.Status()
	r := Record{
		Node: s.cfg.Node, Incarnation: s.inc, State: st.State, UnitsRunning: s.unitsMayRun.Load(),
		Token: st.Token, Version: s.opts.Version, Since: st.Since, From: st.From, Reason: st.Reason,
		Cooldown: st.CooldownUntil,
	}
	if st.State.Holding() {
		r.LeaseLeftMS = st.LeaseLeft.Milliseconds()
	}
	for _, u := range st.Units {
		r.Units = append(r.Units, UnitStatus{Name: u.Name, State: u.ActiveState})
	}
	return r
}

// writeRecord publishes the record, only while our member lease still owns
// the key. Writes are serialised and read unitsMayRun under the same lock,
// so a late write can never say "stopped" after a later "running".
func (s *Supervisor) writeRecord(ctx context.Context, released bool) error {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	lease := clientv3.LeaseID(s.memberLeaseID.Load())
	if lease == 0 {
		return errors.New("no member lease")
	}
	r := s.record()
	r.Released = released
	b, _ := json.Marshal(r)
	key := s.keys.Member(s.cfg.Node)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.LeaseValue(key), "=", lease)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(lease))).Commit()
	if err != nil {
		return fmt.Errorf("write member record: %w", err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("write member record: key %s no longer on our lease %x", key, lease)
	}
	return nil
}

// publisher writes the record after transitions, off the loop.
func (s *Supervisor) publisher(bg context.Context) {
	for {
		select {
		case <-bg.Done():
			return
		case <-s.pub:
			if s.memberLeaseID.Load() == 0 {
				continue
			}
			if err := s.writeRecord(bg, false); err != nil {
				s.log.Debug("publish record", "err", err)
			}
		}
	}
}

type renewal struct {
	name  string
	lease clientv3.LeaseID
	sent  time.Time
	ttl   time.Duration
	took  time.Duration
	err   error
}

// startRenewer keeps a lease alive with KeepAliveOnce on our own schedule,
// recording when each request was sent. The client library's KeepAlive is
// not used: it dates its deadline from when an answer is received.
func (s *Supervisor) startRenewer(bg context.Context, name string, lease clientv3.LeaseID) {
	s.stopRenewer(name)
	if name == memberLease {
		s.memberLeaseID.Store(int64(lease))
	}
	ctx, cancel := context.WithCancel(bg)
	s.stopRenew[name] = cancel
	every := s.cfg.Lease.RenewInterval.D()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := s.reqCtx(ctx)
			sent := time.Now()
			ttl, err := s.keepAliveOnce(rctx, lease)
			rcancel()
			r := renewal{name: name, lease: lease, sent: sent, took: time.Since(sent), ttl: ttl, err: err}
			if s.opts.RenewObserver != nil {
				s.opts.RenewObserver(name, r.took, err)
			}
			select {
			case s.renewals <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
}

func (s *Supervisor) stopRenewer(name string) {
	if c := s.stopRenew[name]; c != nil {
		c()
		delete(s.stopRenew, name)
	}
	if name == memberLease {
		s.memberLeaseID.Store(0)
	}
}

type leaderObs struct {
	info   LeaderInfo
	ctl    Control
	ctlErr error
	err    error
}

// observeLeader reads the election key and the operator's control records
// together on every watch event and every poll interval: the watches make
// reactions fast, the poll makes them certain (a lost watch is followed by
// a fresh read, never trusted silently).
func (s *Supervisor) observeLeader(bg context.Context) {
	t := time.NewTicker(s.cfg.Units.PollInterval.D())
	defer t.Stop()
	var leaderW, ctlW clientv3.WatchChan
	wctx, wcancel := context.WithCancel(bg)
	newWatch := func() {
		wcancel()
		wctx, wcancel = context.WithCancel(bg)
		leaderW = s.cli.Watch(clientv3.WithRequireLeader(wctx), s.keys.Leader())
		ctlW = s.cli.Watch(clientv3.WithRequireLeader(wctx), s.keys.Control(), clientv3.WithPrefix())
	}
	newWatch()
	defer func() { wcancel() }()
	lost := func(wr clientv3.WatchResponse, ok bool) bool {
		if ok && wr.Err() == nil {
			return false
		}
		if sleep(bg, 200*time.Millisecond) == nil {
			newWatch()
		}
		return true
	}
	for {
		select {
		case <-bg.Done():
			return
		case wr, ok := <-leaderW:
			lost(wr, ok)
		case wr, ok := <-ctlW:
			lost(wr, ok)
		case <-t.C:
		}
		rctx, cancel := s.reqCtx(bg)
		offer(s.leaders, s.readLeaderAndControl(rctx))
		cancel()
	}
}

// readLeaderAndControl reads both in one transaction (one revision).
func (s *Supervisor) readLeaderAndControl(ctx context.Context) leaderObs {
	start := time.Now()
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.keys.Leader()),
		clientv3.OpGet(s.keys.Control(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return leaderObs{err: fmt.Errorf("read election key and control records: %w", err)}
	}
	li := LeaderInfo{Revision: resp.Header.Revision, ReadStart: start}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 {
		li.Node, li.Token, li.Lease = string(kvs[0].Value), kvs[0].CreateRevision, clientv3.LeaseID(kvs[0].Lease)
	}
	var kvs []*mvccKV
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		kvs = append(kvs, &mvccKV{Key: kv.Key, Value: kv.Value})
	}
	ctl, cerr := parseControl(s.keys, kvs)
	return leaderObs{info: li, ctl: ctl, ctlErr: cerr}
}

type unitObs struct {
	started time.Time
	states  []fencing.UnitState
	err     error
}

// observeUnits polls the managed units' states.
func (s *Supervisor) observeUnits(bg context.Context) {
	for {
		offer(s.unitObs, s.readUnits(bg))
		if sleep(bg, s.cfg.Units.PollInterval.D()) != nil {
			return
		}
	}
}

// readUnits reads the managed units' states once, bounded by the poll
// interval.
func (s *Supervisor) readUnits(bg context.Context) unitObs {
	started := time.Now()
	ctx, cancel := context.WithTimeout(bg, s.cfg.Units.PollInterval.D())
	defer cancel()
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	return unitObs{started: started, states: states, err: err}
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

// keepAliveOnce renews lease once through every renewal client at the same
// time (one per etcd endpoint; see Options.RenewClients) and returns the
// first success. gRPC only notices a silently dead connection after its
// keepalive (10 s at the least), and the client's round robin would keep
// sending some renewals into it; in parallel, one live member is enough.
// "Lease not found" from any member is final: members forward renewals to
// the etcd leader, so it is the leader's answer.
func (s *Supervisor) keepAliveOnce(ctx context.Context, lease clientv3.LeaseID) (time.Duration, error) {
	clients := s.opts.RenewClients
	if len(clients) == 0 {
		clients = []*clientv3.Client{s.cli}
	}
	type answer struct {
		ttl time.Duration
		err error
	}
	answers := make(chan answer, len(clients))
	for _, c := range clients {
		go func() {
			resp, err := c.KeepAliveOnce(ctx, lease)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			answers <- answer{ttl: time.Duration(resp.TTL) * time.Second}
		}()
	}
	var errs []error
	for range clients {
		a := <-answers
		switch {
		case a.err == nil:
			return a.ttl, nil
		case errors.Is(a.err, rpctypes.ErrLeaseNotFound):
			return 0, a.err
		}
		errs = append(errs, a.err)
	}
	return 0, errors.Join(errs...)
}
