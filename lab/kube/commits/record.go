// Package commits judges the real control plane where its writes land: in
// etcd. It reads what etcd committed under the apiservers' prefix (each
// write with its own revision, the order in which etcd applied them),
// decodes the objects as the apiserver stored them, attributes every write
// of the managed components to a writer and a term (matched to the
// apiservers' audit logs, or carried in the object), and reports the
// writes of a term committed after the next term's first write ("late
// commits") and the writes committed without an accepted audit entry
// ("ghost writes"). lab/kube/audit judges the apiservers' answers; this
// package judges what those answers could not see: a request whose answer
// was lost, and a request that an old term sent and etcd ran only later.
package commits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Write is one revision of one key, as etcd committed it.
type Write struct {
	Rev       int64  `json:"rev"`        // the write's revision (a delete's tombstone)
	CreateRev int64  `json:"create_rev"` // the key's create revision (0 on a delete)
	Key       string `json:"key"`
	Delete    bool   `json:"delete,omitempty"`
	Value     []byte `json:"value,omitempty"` // as the apiserver stored it (none on a delete)
	Prev      []byte `json:"prev,omitempty"`  // the value before (none on a create)
	// PrevRev is the revision of the key's previous write (0: none, or a
	// recording made before it was kept), which may lie before FromRev.
	PrevRev int64 `json:"prev_rev,omitempty"`
}

// Recording is every write under Prefix in revisions [FromRev, ToRev].
type Recording struct {
	Prefix  string  `json:"prefix"` // the apiservers' --etcd-prefix
	FromRev int64   `json:"from_rev"`
	ToRev   int64   `json:"to_rev"`
	Writes  []Write `json:"writes"`
}

// Recorder follows the keys under a prefix from the revision it started
// at: a watch from that revision (etcd's own history) that runs while the
// trial does, so that the apiservers' compaction (every 5 minutes) cannot
// remove the start of a long trial before it is read.
type Recorder struct {
	cli    *clientv3.Client
	prefix string
	from   int64
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	writes []Write
	seen   int64 // every write up to this revision received
	err    error
}

// Start records every write under prefix committed after the current
// revision.
func Start(ctx context.Context, cli *clientv3.Client, prefix string) (*Recorder, error) {
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := cli.Get(gctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("commits: current revision: %w", err)
	}
	rec := &Recorder{cli: cli, prefix: prefix, from: resp.Header.Revision + 1, seen: resp.Header.Revision, done: make(chan struct{})}
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	rec.cancel = wcancel
	go func() {
		defer close(rec.done)
		rec.follow(wctx, rec.from)
	}()
	return rec, nil
}

// follow appends the watch's writes until ctx ends or the watch fails.
func (r *Recorder) follow(ctx context.Context, from int64) {
	wch := r.cli.Watch(ctx, r.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	for resp := range wch {
		r.mu.Lock()
		if err := resp.Err(); err != nil {
			if resp.CompactRevision != 0 {
				err = fmt.Errorf("etcd compacted its history to revision %d before it was read (from %d): %w", resp.CompactRevision, from, err)
			}
			r.err = err
			r.mu.Unlock()
			return
		}
		for _, ev := range resp.Events {
			w := Write{Rev: ev.Kv.ModRevision, CreateRev: ev.Kv.CreateRevision, Key: string(ev.Kv.Key),
				Delete: ev.Type == clientv3.EventTypeDelete, Value: ev.Kv.Value}
			if ev.PrevKv != nil {
				w.Prev, w.PrevRev = ev.PrevKv.Value, ev.PrevKv.ModRevision
			}
			r.writes = append(r.writes, w)
			r.seen = max(r.seen, w.Rev)
		}
		if resp.IsProgressNotify() {
			// A progress notification is sent only once every event up
			// to its revision was.
			r.seen = max(r.seen, resp.Header.Revision)
		}
		r.mu.Unlock()
	}
}

// Stop waits until the recording holds every write up to the current
// revision (at most until ctx ends) and returns it. A recording that
// cannot be completed is an error: a trial must not pass at etcd on a
// history it did not read.
func (r *Recorder) Stop(ctx context.Context) (Recording, error) {
	defer func() { r.cancel(); <-r.done }()
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := r.cli.Get(gctx, r.prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return Recording{}, fmt.Errorf("commits: current revision: %w", err)
	}
	to := resp.Header.Revision
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		r.mu.Lock()
		seen, werr := r.seen, r.err
		r.mu.Unlock()
		switch {
		case werr != nil:
			return Recording{}, fmt.Errorf("commits: watch of %s from revision %d: %w", r.prefix, r.from, werr)
		case seen >= to:
			return r.recording(to), nil
		}
		// Progress is only notified on request (or every 10 minutes);
		// the request reaches the watch stream of a context with the same
		// gRPC metadata as the watch's (none).
		_ = r.cli.RequestProgress(ctx)
		select {
		case <-ctx.Done():
			return Recording{}, fmt.Errorf("commits: the watch of %s reached revision %d of %d: %w", r.prefix, seen, to, ctx.Err())
		case <-r.done:
			r.mu.Lock()
			if r.err == nil {
				r.err = errors.New("watch ended")
			}
			r.mu.Unlock()
		case <-tick.C:
		}
	}
}

func (r *Recorder) recording(to int64) Recording {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := Recording{Prefix: r.prefix, FromRev: r.from, ToRev: to}
	for _, w := range r.writes {
		if w.Rev <= to {
			rec.Writes = append(rec.Writes, w)
		}
	}
	return rec
}
