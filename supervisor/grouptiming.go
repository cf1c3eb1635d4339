package supervisor

import (
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// legacyProofMargin is the proof margin assumed for a holder whose timing
// is not known (its record carries none, a version before group.Timing, or
// was not read): the smallest of the shipped profiles' (fast-kill: S_max
// 0.3 s + lease.slack 0.45 s since its watchdog became the backstop; 0.8 s
// before, when lease.slack was 0.5 s). legacyTTL is the lease assumed for a member
// whose record carries no timing: the longest shipped profile's (default).
// A member of an older version configured beyond them is not covered.
const (
	legacyProofMargin = 750 * time.Millisecond
	legacyTTL         = 10 * time.Second
	// maxTTL bounds a published lease.ttl, so that a corrupt record cannot
	// make the blind wait endless.
	maxTTL = time.Hour
)

// groupTiming is what this member knows of the other members' lease
// timings, from their records and from the leases it reads, so that the
// barrier's proofs hold for the member they are about and not only for
// ours: during a change of profile node by node (or of lease.ttl,
// units.stop_timeout, units.kill_grace, lease.slack) a member on a longer
// lease or a smaller stop budget than ours is in the group. A proof about a
// holder uses the smaller of our margin and the holder's published one, or,
// when its timing is not known, the smallest of ours, legacyProofMargin and
// every member's known; the two-read proof the shorter of our TTL and the
// lease's own granted TTL; a blind wait the longest lease known. A member
// not seen for two of the longest leases is forgotten (a holder forgotten
// so is a holder of unknown timing: the conservative case). It owns its
// state; the observer, the barrier and the peer check call it.
type groupTiming struct {
	ownTTL, ownMargin time.Duration

	mu      sync.Mutex
	members map[string]seenTiming
	granted seenTiming // the longest granted TTL read of another member's lease
}

type seenTiming struct {
	ttl, margin time.Duration
	published   bool // the record carried its timing
	at          time.Time
}

func newGroupTiming(ttl, margin time.Duration) *groupTiming {
	return &groupTiming{ownTTL: ttl, ownMargin: margin, members: map[string]seenTiming{}}
}

// observe notes the timings of the records read at now (self excluded).
func (g *groupTiming) observe(recs map[string]group.Record, self string, now time.Time) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for node, r := range recs {
		if node == self {
			continue
		}
		t := seenTiming{ttl: legacyTTL, margin: legacyProofMargin, at: now}
		if r.Timing != nil {
			t.published = true
			t.ttl = min(max(0, time.Duration(r.Timing.TTLMS)*time.Millisecond), maxTTL)
			t.margin = max(0, time.Duration(r.Timing.ProofMarginMS)*time.Millisecond)
		}
		g.members[node] = t
	}
	g.forget(now)
}

// sawLease notes the granted TTL of another member's lease read at now.
func (g *groupTiming) sawLease(granted time.Duration, now time.Time) {
	if g == nil || granted <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if granted >= g.granted.ttl || now.Sub(g.granted.at) > 2*g.granted.ttl {
		g.granted = seenTiming{ttl: granted, at: now}
	}
}

// forget drops what was last seen longer than two of the longest leases
// ago: that member's leases have lapsed since.
func (g *groupTiming) forget(now time.Time) {
	keep := 2 * g.longest()
	for node, t := range g.members {
		if now.Sub(t.at) > keep {
			delete(g.members, node)
		}
	}
	if now.Sub(g.granted.at) > keep {
		g.granted = seenTiming{}
	}
}

func (g *groupTiming) longest() time.Duration {
	l := max(g.ownTTL, g.granted.ttl)
	for _, t := range g.members {
		l = max(l, t.ttl)
	}
	return l
}

// proofMargin is the S_max + lease.slack to reason with about holder's
// lease (see groupTiming): a lease with less than this left proves its
// holder past its fence instant.
func (g *groupTiming) proofMargin(holder string) time.Duration {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.members[holder]; ok && t.published {
		return min(g.ownMargin, t.margin)
	}
	m := min(g.ownMargin, legacyProofMargin)
	for _, t := range g.members {
		m = min(m, t.margin)
	}
	return m
}

// longestTTL is the longest lease.ttl of any member known, or of any lease
// of another member read.
func (g *groupTiming) longestTTL() time.Duration {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.longest()
}

// differs names the members whose timing is not ours, with it; a record
// without timing (an older version) is named with a nil Timing.
func (g *groupTiming) differs(recs map[string]group.Record, self string) map[string]*group.Timing {
	out := map[string]*group.Timing{}
	if g == nil {
		return out
	}
	own := g.own()
	for node, r := range recs {
		if node != self && (r.Timing == nil || *r.Timing != own) {
			out[node] = r.Timing
		}
	}
	return out
}

// own is this member's timing as its record publishes it.
func (g *groupTiming) own() group.Timing {
	return group.Timing{TTLMS: g.ownTTL.Milliseconds(), ProofMarginMS: g.ownMargin.Milliseconds()}
}
