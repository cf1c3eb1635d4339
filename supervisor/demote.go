package supervisor

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// demote starts the graceful path: units down in reverse order, record
// says so, then the key and lease are released. cooldown > 0 keeps this
// member out of the election for that long.
func (s *Supervisor) demote(bg context.Context, kind, reason string, cooldown time.Duration) {
	if s.jobs.cur != nil {
		s.jobs.cur.cancel()
		// The cancelled job reports back through jobDone; demote runs as
		// soon as it has (step sees Promoting/Active with shutting, or the
		// promote result arrives while state is Demoting).
	}
	s.term.gate.closeWait(s.blockFor(500 * time.Millisecond))
	s.cutAPI()
	if cooldown > 0 {
		s.loop.cooldown = s.now().Add(cooldown)
	}
	s.transition(group.Demoting, kind, reason)
	s.loop.reason = "demoted: " + reason
	launchAfter(s, bg, s.demoteWork(s.term.token, s.term.elecLease))
}

// demoteJob stops the units, says so, and gives the key and its lease back.
func (s *Supervisor) demoteJob(token int64, lease clientv3.LeaseID) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := fencing.StopAll(ctx, s.units, s.cfg.Units.Managed, s.timeout); err != nil {
			return err
		}
		s.term.unitsMayRun.Store(false)
		// Dated before the release, so that a drill can check that the old
		// units were down before anyone else could win.
		s.recordHistory(group.Event{At: s.now(), Node: s.cfg.Node, From: group.Demoting, To: group.UnitsDown, Kind: "units_stopped", Reason: "units confirmed stopped; releasing the lease", Token: token})
		s.withdrawToken()
		s.runHook(ctx, "on_demote", token)
		// With no member lease (a win given back because it went during
		// the campaign) no record lives on it to say anything.
		if s.rec.lease.Load() != 0 {
			if err := s.writeRecord(ctx, true); err != nil {
				s.log.Warn("could not publish units stopped before release", "err", err)
			}
		}
		// Before the release, so that the next leader does not fence this
		// master's apiserver at etcd after a clean handover.
		if err := s.etcdFence.unitsDown(ctx); err != nil {
			s.log.Warn("cannot grant this node's kube-apiserver its etcd role back", "err", err)
		}
		if s.release(ctx, token, lease) {
			s.saveRunState(func(st *runstate.State) { st.ElectionLease, st.Token = 0, 0 })
		}
		return nil
	}
}
