package supervisor

import (
	"fmt"
	"time"
)

// notePrevHolder remembers the last other holder of the election key seen,
// for the next promotion's barrier (see decideBarrier).
func (s *Supervisor) notePrevHolder(li LeaderInfo) {
	if s.firstLook.IsZero() {
		s.firstLook = time.Now()
	}
	// Our own key (a read that raced our win, or an earlier incarnation
	// of ours, whose units start-up stopped) is nobody to wait for.
	if !li.Present() || li.Node == s.cfg.Node {
		return
	}
	s.prevHolder = holderMark{Node: li.Node, Lease: li.Lease, Token: li.Token, Seen: time.Now()}
}

// checkOwnRecord reacts to our own member record missing from a read taken
// after our last write of it: a holder whose units may run fences (the
// others' barrier relies on that record), anyone else writes it again.
func (s *Supervisor) checkOwnRecord(o leaderObs) {
	if o.members == nil || s.memberLease == 0 {
		return
	}
	if _, ok := o.members[s.cfg.Node]; ok {
		return
	}
	rev := s.recordRev.Load()
	if rev == 0 || o.info.Revision < rev {
		return // not written yet, or read before our last write
	}
	if hold := s.holdRev.Load(); hold != 0 && o.info.Revision >= hold && s.state.Holding() {
		s.fenceNow, s.fenceKind = fmt.Sprintf("our member record %s vanished while our units may run", s.keys.Member(s.cfg.Node)), "record_lost"
		return
	}
	s.log.Warn("our member record vanished; writing it again", "key", s.keys.Member(s.cfg.Node))
	offer(s.pub, struct{}{})
}

// barrierHolder is what the next promotion's barrier waits for.
func (s *Supervisor) barrierHolder() holderMark {
	if s.prevHolder.known() {
		return s.prevHolder
	}
	return holderMark{Unknown: true, Seen: s.firstLook}
}
