package supervisor

import (
	"context"
	"fmt"
	"path"
	"sort"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// agreement is this member's.
func (s *Supervisor) agreement() group.Agreement {
	a := group.Agreement{Cluster: s.cfg.Cluster, Prefix: path.Dir(s.keys.Root), Units: s.cfg.Units.Managed}
	if id := s.pool.ClusterID(); id != 0 {
		a.EtcdCluster = fmt.Sprintf("%x", id)
	}
	return a
}

// peerCheck is what watchPeers remembers between reads.
type peerCheck struct {
	started  time.Time
	seen     map[string]time.Time // configured peer -> last time its record was read
	missing  map[string]bool      // reported as missing
	mismatch map[string]string    // node -> differences last reported
	timing   map[string]string    // node -> its other timing, last reported
}

// watchPeers reads the member records every quarter TTL and reports, once
// per change, members whose configuration disagrees with ours and
// configured peers without a record for longer than a TTL: two groups that
// each elect a leader are otherwise invisible to each other.
func (s *Supervisor) watchPeers(bg context.Context) {
	pc := &peerCheck{started: s.now(), seen: map[string]time.Time{}, missing: map[string]bool{}, mismatch: map[string]string{}, timing: map[string]string{}}
	t := time.NewTicker(max(s.cfg.Lease.TTL/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-bg.Done():
			return
		case <-t.C:
		}
		rctx, cancel := s.reqCtx(bg)
		recs, _, err := group.ReadMembers(rctx, s.pool.Hedged(), s.keys)
		cancel()
		if err == nil {
			s.checkPeers(pc, recs, s.now())
		}
	}
}

// checkPeers compares one read of the records with the expectations and
// publishes the findings in Status.
func (s *Supervisor) checkPeers(pc *peerCheck, recs map[string]group.Record, now time.Time) {
	ours := s.agreement()
	var mismatched []string
	for node, r := range recs {
		if node == s.cfg.Node || r.Agree == nil {
			continue // records of older versions carry no agreement
		}
		d := ours.Differences(*r.Agree)
		msg := fmt.Sprint(d)
		if len(d) == 0 {
			if pc.mismatch[node] != "" {
				s.log.Info("member's configuration agrees with ours again", "member", node)
			}
			delete(pc.mismatch, node)
			continue
		}
		mismatched = append(mismatched, fmt.Sprintf("%s: %s", node, msg))
		if pc.mismatch[node] != msg {
			s.log.Error("member is configured differently: fix its configuration so that every member agrees",
				"member", node, "differences", d, "fingerprint", r.Fingerprint, "ours", ours.Fingerprint())
			pc.mismatch[node] = msg
		}
	}
	s.checkTimings(pc, recs, now)
	var missing []string
	ttl := s.cfg.Lease.TTL
	for _, p := range s.cfg.Peers {
		if p == s.cfg.Node {
			continue
		}
		if _, ok := recs[p]; ok {
			pc.seen[p] = now
			if pc.missing[p] {
				s.log.Info("expected peer has a member record again", "peer", p)
				delete(pc.missing, p)
			}
			continue
		}
		last, ok := pc.seen[p]
		if !ok {
			last = pc.started
		}
		if now.Sub(last) <= ttl {
			continue
		}
		missing = append(missing, p)
		if !pc.missing[p] {
			s.log.Error("expected peer has no member record in this group: it is down, or configured with another cluster, etcd.prefix or etcd endpoints",
				"peer", p, "for", now.Sub(last).Round(time.Millisecond), "keys", s.keys.Members())
			pc.missing[p] = true
		}
	}
	sort.Strings(mismatched)
	s.snap.mu.Lock()
	s.snap.st.ConfigMismatch, s.snap.st.MissingPeers = mismatched, missing
	s.snap.mu.Unlock()
}

// Warnings are the group problems this member sees, for /healthz.
func (st Status) Warnings() []string {
	var out []string
	for _, m := range st.ConfigMismatch {
		out = append(out, "member configured differently: "+m)
	}
	for _, p := range st.MissingPeers {
		out = append(out, "expected peer without a member record: "+p)
	}
	for _, ep := range st.ForeignEndpoints {
		out = append(out, "etcd endpoint of another etcd cluster, ignored (remove it from etcd.endpoints): "+ep)
	}
	if x := st.ExecWatch; x != nil && x.Mode == "poll" {
		out = append(out, "exec watch unavailable, stray copies found by the /proc poll only: "+x.Reason)
	}
	return out
}

// checkTimings notes the members' lease timings for the barrier's proofs
// (groupTiming) and reports, once per change, members whose timing is not
// ours: legitimate while a profile is changed node by node (the proofs then
// use the most conservative values, and are slower), a mistake otherwise.
func (s *Supervisor) checkTimings(pc *peerCheck, recs map[string]group.Record, now time.Time) {
	s.timing.observe(recs, s.cfg.Node, now)
	other := s.timing.differs(recs, s.cfg.Node)
	if pc.timing == nil {
		pc.timing = map[string]string{}
	}
	for node, t := range other {
		msg := "not published (an older version): assumed " + timingText(group.Timing{TTLMS: legacyTTL.Milliseconds(), ProofMarginMS: legacyProofMargin.Milliseconds()})
		if t != nil {
			msg = timingText(*t)
		}
		if pc.timing[node] != msg {
			s.log.Warn("member runs other lease timings than ours; the promotion barrier assumes the most conservative of them until every member runs the same profile",
				"member", node, "theirs", msg, "ours", timingText(s.timing.own()))
			pc.timing[node] = msg
		}
	}
	for node := range pc.timing {
		if _, ok := other[node]; !ok {
			delete(pc.timing, node)
		}
	}
}

func timingText(t group.Timing) string {
	return fmt.Sprintf("lease.ttl %s, S_max + lease.slack %s", time.Duration(t.TTLMS)*time.Millisecond, time.Duration(t.ProofMarginMS)*time.Millisecond)
}
