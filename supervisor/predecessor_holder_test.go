package supervisor_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// Lab scenario 70: the standby is frozen while the leader's rack is cut,
// and at the thaw systemd's watchdog kills it; its successor must not be
// slower than the frozen process would have been. It takes the holder its
// predecessor saw (from the run state) and passes the barrier as soon as
// that holder's record says its units are down, instead of waiting one
// full lease from its first look as for a holder never seen.
func TestRestartedStandbyWaitsOnlyForTheHolderItsPredecessorSaw(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	standby.Kill() // its run state stays: it saw the leader hold the key
	leader.Cut(true)
	if err := leader.WaitExit(t, 3*ttl, "fence when cut off"); err == nil {
		t.Fatal("the cut leader's Run returned nil, want a fence")
	}
	keys := leader.Sup.Keys()
	waitFor(t, "the cut leader's key and record to lapse", 3*ttl, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l, err1 := w.Admin.Get(ctx, keys.Leader())
		r, err2 := w.Admin.Get(ctx, keys.Member(leader.Name))
		return err1 == nil && err2 == nil && len(l.Kvs) == 0 && len(r.Kvs) == 0
	})

	startAt := time.Now()
	successor := w.Start(standby.Name, nil)
	waitFor(t, "the successor to win the key", 2*ttl, func() bool { return successor.State() == group.Promoting })
	back := w.Start(leader.Name, nil) // the cut master, healed and restarted: its record says its units are stopped
	waitFor(t, "the successor's units", 3*ttl, func() bool { return successor.Units.Running(units[0]) })
	took := firstStartAfter(successor, startAt).Sub(startAt)
	t.Logf("successor started at 0, its units at +%s (one full lease from its first look: about %s)", took.Round(time.Millisecond), ttl+ttl/100+time.Second)
	if took > 4*time.Second { // the blind wait is about 5 s
		t.Fatalf("the successor's units started %s after it: it waited out a lease for an unknown holder, not for the holder its predecessor saw", took)
	}
	assertNoOverlap(t, leader, standby, successor, back)
}

// The holder a predecessor saw is replayed through the election key's
// history: a member that took the key after the predecessor's last look is
// the one to wait for, and a history compacted away leaves the holder
// unknown (one full lease), never the stale one.
func TestSuccessorReplaysTheElectionKeySinceItsPredecessorsLook(t *testing.T) {
	for _, compact := range []bool{false, true} {
		name := "replayed"
		if compact {
			name = "compacted"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			logs := &logTap{}
			w.Options = func(_ string, o *supervisor.Options) { o.Log = slog.New(logs.tee(o.Log.Handler())) }
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			keys := group.NewKeys(supervisortest.FastConfig("m2").Etcd.Prefix, supervisortest.FastConfig("m2").Cluster)
			// A holder "m1", seen by m2 (who then waits as a standby).
			hold := func(node string) (clientv3.LeaseID, int64) { return holdKey(ctx, t, w, keys, node) }
			l1, _ := hold("m1")
			m := w.Start("m2", nil)
			waitFor(t, "m2 to see m1 hold", 10*time.Second, func() bool { return m.Sup.Status().Leader == "m1" })
			m.Kill()
			// After m2's last look: m1's key goes, "m3" holds and goes.
			if _, err := w.Admin.Revoke(ctx, l1); err != nil {
				t.Fatal(err)
			}
			l3, t3 := hold("m3")
			if _, err := w.Admin.Revoke(ctx, l3); err != nil {
				t.Fatal(err)
			}
			if compact {
				r, err := w.Admin.Get(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Admin.Compact(ctx, r.Header.Revision); err != nil {
					t.Fatal(err)
				}
			}
			logs.reset()
			w.Start("m2", nil)
			if compact {
				waitFor(t, "the successor to give up the replay", 10*time.Second, func() bool {
					return logs.has("cannot replay the election key")
				})
				if logs.has("the barrier waits for the election key's last holder") {
					t.Fatal("the successor adopted a holder although the history was compacted")
				}
				return
			}
			want := "holder=m3 token=" + itoa(t3)
			waitFor(t, "the successor to adopt "+want, 10*time.Second, func() bool {
				return logs.has("the barrier waits for the election key's last holder") && logs.has(want)
			})
		})
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// logTap records every log line (level, message and attributes, as text) of the
// members it is attached to.
type logTap struct {
	mu    sync.Mutex
	lines []string
}

func (l *logTap) tee(next slog.Handler) slog.Handler { return tapHandler{next: next, tap: l} }

func (l *logTap) reset() { l.mu.Lock(); l.lines = nil; l.mu.Unlock() }

// count is how many lines have every one of parts.
func (l *logTap) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			n++
		}
	}
	return n
}

func (l *logTap) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

type tapHandler struct {
	next  slog.Handler
	tap   *logTap
	attrs []slog.Attr
}

func (h tapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tapHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	add := func(a slog.Attr) bool { b.WriteString(" " + a.Key + "=" + a.Value.String()); return true }
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.tap.mu.Lock()
	h.tap.lines = append(h.tap.lines, b.String())
	h.tap.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h tapHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return tapHandler{next: h.next.WithAttrs(as), tap: h.tap, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h tapHandler) WithGroup(g string) slog.Handler {
	return tapHandler{next: h.next.WithGroup(g), tap: h.tap, attrs: h.attrs}
}

// A restarted member reads its predecessor's run state before its loop can
// replace the file: here the loop sees the peer hold the key (and saves
// that holder) while start-up is held up by a hung service manager. The
// successor must still recognise its predecessor's live record and replace
// it, not wait for it as for another machine using its name.
func TestRestartedMemberReadsItsPredecessorBeforeTheLoopWrites(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	_, others := leaderOf(t, a, b)
	standby := others[0]
	standby.Kill() // its record stays on its live member lease
	logs := &logTap{}
	w.Options = func(name string, o *supervisor.Options) {
		if name != standby.Name {
			return
		}
		o.Log = slog.New(logs.tee(o.Log.Handler()))
		units := o.Units.(*fencing.Memory)
		units.SetHung(true) // start-up's first look at the units waits
		time.AfterFunc(2*time.Second, func() { units.SetHung(false) })
	}
	successor := w.Start(standby.Name, nil)
	waitFor(t, "the successor registered", 4*ttl, func() bool { return successor.State() == group.Standby })
	if logs.has("a live member record already uses this node name") {
		t.Fatal("the successor waited for its predecessor's record as for another machine's: it lost its run state to its own loop")
	}
}

// The holder replayed at start-up is complete only up to the successor's
// registration; its promotion replays on to its own win. Here the group is
// frozen (no campaign) while the successor starts and adopts m1, then "m3"
// holds the key and loses it while the successor cannot read; after the
// unfreeze its barrier must wait for m3, not for m1.
func TestPromotionReplaysTheKeyFromStartUpToItsWin(t *testing.T) {
	w := newWorld(t)
	logs := &logTap{}
	w.Options = func(_ string, o *supervisor.Options) { o.Log = slog.New(logs.tee(o.Log.Handler())) }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := supervisortest.FastConfig("m2")
	keys := group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster)
	hold := func(node string) (clientv3.LeaseID, int64) { return holdKey(ctx, t, w, keys, node) }
	l1, _ := hold("m1")
	m := w.Start("m2", nil)
	waitFor(t, "m2 to see m1 hold", 10*time.Second, func() bool { return m.Sup.Status().Leader == "m1" })
	m.Kill()
	if _, err := w.Admin.Revoke(ctx, l1); err != nil {
		t.Fatal(err)
	}
	if err := group.SetFreeze(ctx, w.Admin, keys, group.Freeze{Reason: "test", At: time.Now()}, group.Event{At: time.Now(), Node: "test"}); err != nil {
		t.Fatal(err)
	}
	logs.reset()
	succ := w.Start("m2", nil)
	waitFor(t, "the successor to adopt m1", 10*time.Second, func() bool {
		return logs.has("the barrier waits for the election key's last holder") && logs.has("holder=m1")
	})
	succ.Cut(true) // it reads nothing while m3 comes and goes
	l3, t3 := hold("m3")
	if _, err := w.Admin.Revoke(ctx, l3); err != nil {
		t.Fatal(err)
	}
	succ.Cut(false)
	time.Sleep(time.Second)
	if logs.has("holder=m3") {
		t.Fatal("the successor saw m3 itself: the test did not reach the gap it is about")
	}
	if err := group.ClearFreeze(ctx, w.Admin, keys); err != nil {
		t.Fatal(err)
	}
	want := "holder=m3 token=" + itoa(t3)
	waitFor(t, "the promotion's replay to find "+want, 15*time.Second, func() bool {
		return logs.has("the election key had another holder after our previous incarnation's") && logs.has(want)
	})
	waitFor(t, "the barrier to wait for m3", 5*time.Second, func() bool { return logs.has("record of m3 (token " + itoa(t3)) })
}

// holdKey puts the election key for node on a fresh lease of 60 s, as a
// holder's campaign would, and returns the lease and the store revision.
func holdKey(ctx context.Context, t *testing.T, w *world, keys group.Keys, node string) (clientv3.LeaseID, int64) {
	t.Helper()
	l, err := w.Admin.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Admin.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(keys.Leader()), "=", 0)).
		Then(clientv3.OpPut(keys.Leader(), node, clientv3.WithLease(l.ID))).Commit()
	if err != nil || !r.Succeeded {
		t.Fatalf("put the election key for %s: %v", node, err)
	}
	return l.ID, r.Header.Revision
}
