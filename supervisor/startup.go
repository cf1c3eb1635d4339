package supervisor

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// registration is a finished start-up: the member record is on lease.
type registration struct {
	lease lease
	// crashed: a record of an earlier incarnation of this member was
	// still alive, so that incarnation ended without leaving the group.
	crashed bool
	rev     int64      // store revision of the write that registered us
	holder  holderMark // the predecessor's last holder, replayed up to rev (zero: none known)
}

// startupJob reconciles (stops whatever managed unit runs: this process
// holds nothing yet), then registers the member record on a fresh lease.
func (s *Supervisor) startupJob(ctx context.Context) (registration, error) {
	states, err := s.units.States(ctx, s.cfg.Units.Managed)
	if err != nil {
		return registration{}, fmt.Errorf("read managed units: %w", err)
	}
	if r := runningUnits(states); len(r) > 0 {
		s.log.Warn("start-up: managed units found running; stopping them before anything else", "units", r)
		if err := fencing.StopAll(ctx, s.units, s.cfg.Units.Managed, s.timeout); err != nil {
			return registration{}, fmt.Errorf("start-up reconcile: %w", err)
		}
	}
	s.term.unitsMayRun.Store(false)
	pred := s.kept.pred
	reg, err := s.register(ctx, pred)
	if err == nil {
		reg.holder = s.predecessorHolder(ctx, pred, reg.rev)
	}
	return reg, err
}

// register puts our member record on a fresh lease, waiting while a live
// record under our name (not our predecessor's to replace) is in the way.
func (s *Supervisor) register(ctx context.Context, prev predecessor) (registration, error) {
	crashed, warned := false, false
	for {
		reg, other, err := s.registerOnce(ctx, prev)
		if err != nil || reg.lease.id != 0 {
			reg.crashed = reg.crashed || crashed
			return reg, err
		}
		// A record under our name is alive: an earlier incarnation of this
		// process (killed, its lease not yet expired) or, if it never goes
		// away, another machine configured with the same node name.
		crashed = true
		if !warned {
			s.warnNameInUse(other)
			warned = true
		}
		if err := sleep(ctx, s.cfg.Units.PollInterval); err != nil {
			return registration{}, err
		}
	}
}

// registerOnce is one attempt: grant, create the record on the lease (or
// replace our predecessor's), or give the lease back and report the record
// in the way (a zero registration and no error).
func (s *Supervisor) registerOnce(ctx context.Context, prev predecessor) (registration, *mvccpb.KeyValue, error) {
	l, err := s.leases.grant(ctx, s.cfg.Lease.TTL)
	if err != nil {
		return registration{}, nil, err
	}
	rec := marshalRecord(s.record())
	c, err := s.leases.putOnLease(ctx, s.keys.Member(s.cfg.Node), string(rec), l.id)
	if err == nil && c.ours {
		return s.registered(l, c.modRev, false, prev), nil, nil
	}
	if err == nil {
		// Our previous incarnation's record, on the lease it saved?
		rev, ok, rerr := s.replacePredecessorRecord(ctx, prev, l.id, rec)
		if rerr == nil && ok {
			s.log.Info("replaced the record our previous incarnation left; giving back its leases", "incarnation", prev.Incarnation)
			return s.registered(l, rev, true, prev), nil, nil
		}
		err = rerr
	}
	s.leases.revoke(l.id)
	if err != nil {
		return registration{}, nil, fmt.Errorf("register member record: %w", err)
	}
	return registration{}, c.other, nil
}

// registered finishes a registration at rev: our predecessor's leases go
// back (our units are confirmed stopped), and the run state is ours.
func (s *Supervisor) registered(l lease, rev int64, crashed bool, prev predecessor) registration {
	s.rec.mu.Lock()
	s.wrote(rev, false)
	s.rec.mu.Unlock()
	s.givePredecessorLeasesBack(prev)
	s.publishPredecessorFence(context.Background(), prev)
	s.saveRunState(func(st *runstate.State) {
		*st = runstate.State{MemberLease: int64(l.id), Holder: st.Holder}
	})
	return registration{lease: l, crashed: crashed, rev: rev}
}

// warnNameInUse says once (not every poll) that another record holds our
// name, and what it says.
func (s *Supervisor) warnNameInUse(kv *mvccpb.KeyValue) {
	var other group.Record
	if kv != nil {
		_ = json.Unmarshal(kv.Value, &other)
	}
	s.log.Warn("a live member record already uses this node name; waiting for it to expire",
		"incarnation", other.Incarnation, "state", other.State, "hint", "if this persists, two machines share the node name")
}

// leaveJob ends the membership. The record is not deleted: it says this
// member stopped with its units down and lapses with its lease, so that a
// peer's barrier can read that rather than find no trace at all (which it
// must wait out); a successor on this machine replaces it at once (see
// replacePredecessorRecord).
func (s *Supervisor) leaveJob(lease clientv3.LeaseID) func(context.Context) error {
	return func(ctx context.Context) error {
		if lease == 0 {
			return nil
		}
		err := s.putRecord(ctx, func(r *group.Record) {
			r.State, r.UnitsRunning, r.Released, r.Reason = group.Stopped, false, true, "left the group"
		})
		if err != nil {
			s.log.Warn("could not publish that we left; revoking our record", "err", err)
			s.leases.revoke(lease)
		}
		return nil
	}
}
