package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// silentWatch destroys this host's connections to the etcd members that
// stop answering while this node holds the election key
// (Options.ResetConnectionsTo, etcd.reset_silent). The node's
// kube-apiserver keeps its established connections to a member that a
// partition took away (scenario 46) or that stalls (scenario 68: the
// process stopped, its kernel still acknowledging) in gRPC's ready set and
// sends part of the components' requests there until its TCP user timeout
// (10 s) or keepalive (30 s + 10 s). Reset, it reconnects, fails to or
// hangs in the handshake, and sends to the members that answer.
//
// It starts at the promotion and asks every member for its status at once
// (a takeover is when the partition is already there: the first silence
// is reset), then every interval; later silences are reset once they last
// two looks in a row (one slow answer costs nobody anything), and once per
// silence: a member is reset again only after it has answered. A look in
// which no member answers resets nothing: this node is the one cut off,
// which the fence handles, and nothing is left to steer to. It owns
// its state. Safety does not depend on it.
type silentWatch struct {
	pool    *etcdconn.Pool
	reset   func([]string) (int, error) // nil: off
	every   time.Duration
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	cancel context.CancelFunc // nil: not running
}

// start begins watching until stop or until bg ends, unless it already
// runs. The loop calls it (at a win) and stops it (on leaving the holding
// states), so a stop never precedes its start.
func (w *silentWatch) start(bg context.Context) {
	if w == nil || w.reset == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(bg)
	w.cancel = cancel
	go w.run(ctx)
}

// stop ends the watch (a no-op when it does not run).
func (w *silentWatch) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel != nil {
		w.cancel()
		w.cancel = nil
	}
}

func (w *silentWatch) run(ctx context.Context) {
	streak := map[string]int{} // endpoint -> silent looks in a row
	done := map[string]bool{}  // endpoint -> reset during this silence
	need := 1                  // the promotion's look resets at once
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		if ctx.Err() != nil {
			return
		}
		w.look(ctx, streak, done, need)
		need = 2
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// look asks every member once and resets those silent for need looks.
func (w *silentWatch) look(ctx context.Context, streak map[string]int, done map[string]bool, need int) {
	pctx, cancel := context.WithTimeout(ctx, w.timeout)
	silent := w.pool.Silent(pctx)
	cancel()
	if ctx.Err() != nil {
		return // stopped mid-look: unheard answers are no silence
	}
	if len(silent) >= len(w.pool.Endpoints()) {
		// Nobody answers: the fault is on our side (the fence's to
		// handle), and there is no member to steer the apiserver to.
		clear(streak)
		clear(done)
		return
	}
	now := map[string]bool{}
	var due []string
	for _, ep := range silent {
		now[ep] = true
		streak[ep]++
		if streak[ep] >= need && !done[ep] {
			due = append(due, ep)
		}
	}
	for ep := range streak {
		if !now[ep] {
			delete(streak, ep)
			delete(done, ep)
		}
	}
	if len(due) == 0 {
		return
	}
	if ctx.Err() != nil {
		return // stopped while asking: this node no longer holds the key
	}
	n, err := w.reset(due)
	for _, ep := range due {
		done[ep] = true
	}
	if err != nil {
		w.log.Warn("connections to silent etcd members not all reset; requests on them wait for the apiserver's TCP timeout",
			"silent", due, "destroyed", n, "err", err)
		return
	}
	w.log.Info("connections to silent etcd members reset", "silent", due, "destroyed", n)
}
