package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// Event is one change the observer saw in etcd, stamped with the observer's
// wall clock when it arrived (an upper bound of when it happened; the
// observer sits on an uncut subnet a few hundred microseconds from etcd).
type Event struct {
	At       time.Time     `json:"at"`
	Leader   *string       `json:"leader,omitempty"` // election key changed: new holder ("" = deleted)
	Token    int64         `json:"token,omitempty"`
	Record   *group.Record `json:"record,omitempty"` // a member record was written
	Gone     string        `json:"gone,omitempty"`   // a member record expired or was deleted
	Revision int64         `json:"revision"`
}

// Snapshot is the group as last seen.
type Snapshot struct {
	Leader  string
	Token   int64
	Since   time.Time // when the observer saw the current holder win
	Records map[string]group.Record
}

// Observer watches the supervisors' keys in etcd from the lab's observer
// host, for the whole run: who holds the election key, every member record,
// and the instant each change arrived.
type Observer struct {
	cli  *clientv3.Client
	keys group.Keys
	log  *slog.Logger

	mu     sync.Mutex
	cur    Snapshot
	events []Event
	rev    int64
}

// Observe reads the current state and keeps watching until ctx ends.
func Observe(ctx context.Context, cli *clientv3.Client, keys group.Keys, log *slog.Logger) (*Observer, error) {
	o := &Observer{cli: cli, keys: keys, log: log, cur: Snapshot{Records: map[string]group.Record{}}}
	if err := o.resync(ctx); err != nil {
		return nil, err
	}
	go o.loop(ctx)
	return o, nil
}

func (o *Observer) prefix() string { return strings.TrimSuffix(o.keys.Root, "/") + "/" }

// resync replaces the state with a fresh read (after a watch was lost, e.g.
// while etcd had no quorum).
func (o *Observer) resync(ctx context.Context) error {
	// Require a leader: in a minority partition (scenario 32) a member
	// without one would hold the read until the timeout; this way it fails
	// at once and the next attempt goes to another member.
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 3*time.Second)
	defer cancel()
	resp, err := o.cli.Get(rctx, o.prefix(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("observer: read %s: %w", o.prefix(), err)
	}
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	leader, token := "", int64(0)
	recs := map[string]group.Record{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case k == o.keys.Leader():
			leader, token = string(kv.Value), kv.CreateRevision
		case strings.HasPrefix(k, o.keys.Members()):
			var r group.Record
			if json.Unmarshal(kv.Value, &r) == nil {
				recs[r.Node] = r
			}
		}
	}
	if leader != o.cur.Leader || token != o.cur.Token {
		l := leader
		o.events = append(o.events, Event{At: now, Leader: &l, Token: token, Revision: resp.Header.Revision})
		o.cur.Leader, o.cur.Token, o.cur.Since = leader, token, now
	}
	for n, r := range recs {
		if old, ok := o.cur.Records[n]; !ok || old.State != r.State || old.UnitsRunning != r.UnitsRunning || old.Incarnation != r.Incarnation {
			rc := r
			o.events = append(o.events, Event{At: now, Record: &rc, Revision: resp.Header.Revision})
		}
	}
	for n := range o.cur.Records {
		if _, ok := recs[n]; !ok {
			o.events = append(o.events, Event{At: now, Gone: n, Revision: resp.Header.Revision})
		}
	}
	o.cur.Records = recs
	o.rev = resp.Header.Revision
	return nil
}

func (o *Observer) loop(ctx context.Context) {
	for ctx.Err() == nil {
		o.mu.Lock()
		rev := o.rev
		o.mu.Unlock()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := o.cli.Watch(wctx, o.prefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				o.log.Debug("observer: watch interrupted", "err", err)
				break
			}
			o.apply(resp)
		}
		cancel()
		// Lost the watch (no etcd leader, member gone): read afresh once
		// etcd answers again, then watch from there.
		for ctx.Err() == nil {
			if err := o.resync(ctx); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func (o *Observer) apply(resp clientv3.WatchResponse) {
	now := time.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ev := range resp.Events {
		k := string(ev.Kv.Key)
		switch {
		case k == o.keys.Leader():
			leader, token := "", int64(0)
			if ev.Type == clientv3.EventTypePut {
				leader, token = string(ev.Kv.Value), ev.Kv.CreateRevision
			}
			if leader != o.cur.Leader || token != o.cur.Token {
				o.cur.Leader, o.cur.Token, o.cur.Since = leader, token, now
				l := leader
				o.events = append(o.events, Event{At: now, Leader: &l, Token: token, Revision: ev.Kv.ModRevision})
			}
		case strings.HasPrefix(k, o.keys.Members()):
			node := strings.TrimPrefix(k, o.keys.Members())
			if ev.Type == clientv3.EventTypeDelete {
				delete(o.cur.Records, node)
				o.events = append(o.events, Event{At: now, Gone: node, Revision: ev.Kv.ModRevision})
				continue
			}
			var r group.Record
			if err := json.Unmarshal(ev.Kv.Value, &r); err != nil {
				continue
			}
			old, had := o.cur.Records[r.Node]
			o.cur.Records[r.Node] = r
			if !had || old.State != r.State || old.UnitsRunning != r.UnitsRunning || old.Incarnation != r.Incarnation {
				rc := r
				o.events = append(o.events, Event{At: now, Record: &rc, Revision: ev.Kv.ModRevision})
			}
		}
	}
	if resp.Header.Revision > o.rev {
		o.rev = resp.Header.Revision
	}
}

// Now returns the current snapshot (a copy).
func (o *Observer) Now() Snapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.cur
	s.Records = make(map[string]group.Record, len(o.cur.Records))
	for k, v := range o.cur.Records {
		s.Records[k] = v
	}
	return s
}

// Events returns the events seen in [from, to).
func (o *Observer) Events(from, to time.Time) []Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []Event
	for _, e := range o.events {
		if !e.At.Before(from) && e.At.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// LeaderChanges lists the election-key changes seen in [from, to).
func (o *Observer) LeaderChanges(from, to time.Time) []Event {
	var out []Event
	for _, e := range o.Events(from, to) {
		if e.Leader != nil {
			out = append(out, e)
		}
	}
	return out
}

// FirstWin is the first time after from that node was seen holding the key.
func (o *Observer) FirstWin(node string, from time.Time) (time.Time, int64, bool) {
	for _, e := range o.LeaderChanges(from, time.Now().Add(time.Hour)) {
		if *e.Leader == node {
			return e.At, e.Token, true
		}
	}
	return time.Time{}, 0, false
}
