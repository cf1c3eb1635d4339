package supervisor

import (
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// term is the current term, owned by the loop goroutine except where a
// field says otherwise: what this member holds, how long it may act on it,
// and whether units may start. Its published face is view (a fencing.Term),
// which every other reader takes.
type term struct {
	elecLease  clientv3.LeaseID
	token      int64             // our fencing token while we hold the election key; 0 otherwise
	deadline   *fencing.Deadline // fence_at over the member and election leases
	prevHolder holderMark        // the last other holder of the election key seen: the barrier waits for it

	// gate serialises unit starts against fencing (gate.go); the jobs
	// start through it, the loop closes it.
	gate gate
	// unitsMayRun is true from before the first start until every unit is
	// confirmed stopped (set by the jobs, read by the publisher).
	unitsMayRun atomic.Bool
	// view is the snapshot every other goroutine reads.
	view termView
}

// termView publishes the term as one immutable fencing.Term. The loop
// describes the term at the end of every iteration (publish); the
// promotion job says when its starts are allowed (allowStarts), and that
// must reach the guard at once, before the job's own first start asks it.
// Open in the published Term is the loop's verdict AND the promotion's.
type termView struct {
	mu     sync.Mutex
	loop   fencing.Term // as the loop last described it
	starts bool         // the promotion passed its barrier, takeover delay and the token's destinations
	cur    atomic.Pointer[fencing.Term]
}

// publish replaces the loop's description (loop goroutine).
func (v *termView) publish(t fencing.Term) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.loop = t
	v.store()
}

// allowStarts says whether this leadership's promotion lets units start
// (any goroutine).
func (v *termView) allowStarts(on bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.starts = on
	v.store()
}

func (v *termView) store() {
	t := v.loop
	t.Open = t.Open && v.starts
	v.cur.Store(&t)
}

// load is the term as last published; the zero (closed) Term before the
// first publication.
func (v *termView) load() fencing.Term {
	if t := v.cur.Load(); t != nil {
		return *t
	}
	return fencing.Term{}
}

// termOpen is the loop's half of the verdict: holding the key as a
// promoting or active member, with the start gate open. Fencing and
// demoting members are closed, whatever else holds.
func termOpen(state group.State, token int64, gateClosed bool) bool {
	return (state == group.Promoting || state == group.Active) && token != 0 && !gateClosed
}

// describeTerm is the loop's description of the term: the fence instant
// only while the member holds the key (Holding), as status always showed.
func (s *Supervisor) describeTerm() fencing.Term {
	t := fencing.Term{Node: s.cfg.Node, Cluster: s.cfg.Cluster, State: string(s.loop.state),
		Leader: s.loop.leader.Node, LeaderToken: s.loop.leader.Token, Token: s.term.token,
		Open: termOpen(s.loop.state, s.term.token, s.term.gate.closed.Load()), StopMax: s.timeout.StopMax()}
	if !s.loop.state.Holding() {
		return t
	}
	return s.term.deadline.Term(t)
}

// Term is the member's current term as last published: the snapshot the
// guard, the API fence's gates, status and the metrics decide from. Safe
// from any goroutine.
func (s *Supervisor) Term() fencing.Term { return s.term.view.load() }
