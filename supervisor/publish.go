package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// record builds this member's record from the latest snapshot.
func (s *Supervisor) record() Record {
	st := s.Status()
	r := Record{
		Node: s.cfg.Node, Incarnation: s.inc, State: st.State, UnitsRunning: s.unitsMayRun.Load(),
		Token: st.Token, Version: s.opts.Version, Since: st.Since, From: st.From, Reason: st.Reason,
		Cooldown: st.CooldownUntil, Host: hostName, Published: time.Now(),
	}
	a := s.agreement()
	r.Agree, r.Fingerprint = &a, a.Fingerprint()
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
	resp, err := s.pool.Serial().Txn(rctx).
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
