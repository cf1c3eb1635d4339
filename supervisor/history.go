package supervisor

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// historyBacklog bounds the entries kept while etcd does not answer; the
// oldest go first when it is full.
const historyBacklog = 256

// historian appends this member's transitions to the group's history off
// the loop: the loop queues (record) and never waits; its goroutine (run)
// writes. An entry etcd does not take (a partition, an outage) is kept,
// with its original time, and written when etcd answers again.
type historian struct {
	queue   chan group.Event // the loop sends, run receives
	cli     *clientv3.Client
	keys    group.Keys
	retain  int
	timeout time.Duration // one etcd request
	retry   time.Duration // between two tries while etcd does not take an entry
	log     *slog.Logger
}

// run is the historian's goroutine.
func (h *historian) run(bg context.Context) {
	var pending []group.Event
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-bg.Done():
			h.requeue(pending)
			return
		case e := <-h.queue:
			pending = append(pending, e)
			if len(pending) > historyBacklog {
				h.log.Warn("history backlog full while etcd does not answer; oldest entry dropped", "at", pending[0].At, "to", pending[0].To)
				pending = pending[1:]
			}
		case <-retry.C:
		}
		pending = h.write(bg, pending)
		if len(pending) > 0 {
			retry.Reset(h.retry)
		}
	}
}

// write appends pending in order and returns what etcd did not take.
func (h *historian) write(bg context.Context, pending []group.Event) []group.Event {
	for len(pending) > 0 {
		ctx, cancel := context.WithTimeout(bg, h.timeout)
		err := group.AppendHistory(ctx, h.cli, h.keys, pending[0], h.retain)
		cancel()
		if err != nil {
			h.log.Debug("history not written yet; kept for the next try", "err", err, "pending", len(pending))
			return pending
		}
		pending = pending[1:]
	}
	return nil
}

// requeue hands entries not written back to the queue, so that flush gets
// one last try at them when Run returns.
func (h *historian) requeue(pending []group.Event) {
	for _, e := range pending {
		select {
		case h.queue <- e:
		default:
			return
		}
	}
}

// record queues e (loop goroutine; never blocks).
func (h *historian) record(e group.Event) {
	select {
	case h.queue <- e:
	default:
		h.log.Warn("history backlog full; transition not recorded", "to", e.To)
	}
}

// flush writes what run has not written yet, bounded by one request
// timeout: the last transitions (stopped, fencing) are the ones an
// operator most wants to read.
func (h *historian) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	for {
		select {
		case e := <-h.queue:
			if group.AppendHistory(ctx, h.cli, h.keys, e, h.retain) != nil {
				return
			}
		default:
			return
		}
	}
}

// drop discards transitions not yet written, so that Run's final flush
// cannot hold up an exit that must be immediate.
func (h *historian) drop() {
	for {
		select {
		case <-h.queue:
		default:
			return
		}
	}
}

func (s *Supervisor) recordHistory(e group.Event) { s.history.record(e) }
