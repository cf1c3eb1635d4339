package supervisor

import (
	"context"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// historyBacklog bounds the entries kept while etcd does not answer; the
// oldest go first when it is full.
const historyBacklog = 256

// historian appends this member's transitions off the loop, the loop never
// waits for it. An entry etcd does not take (a partition, an outage) is
// kept, with its original time, and written when etcd answers again.
func (s *Supervisor) historian(bg context.Context) {
	var pending []group.Event
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-bg.Done():
			s.requeueHistory(pending)
			return
		case e := <-s.history:
			pending = append(pending, e)
			if len(pending) > historyBacklog {
				s.log.Warn("history backlog full while etcd does not answer; oldest entry dropped", "at", pending[0].At, "to", pending[0].To)
				pending = pending[1:]
			}
		case <-retry.C:
		}
		pending = s.writeHistory(bg, pending)
		if len(pending) > 0 {
			retry.Reset(s.cfg.Units.PollInterval)
		}
	}
}

// writeHistory appends pending in order and returns what etcd did not take.
func (s *Supervisor) writeHistory(bg context.Context, pending []group.Event) []group.Event {
	for len(pending) > 0 {
		ctx, cancel := s.reqCtx(bg)
		err := group.AppendHistory(ctx, s.cli, s.keys, pending[0], s.cfg.History.Retain)
		cancel()
		if err != nil {
			s.log.Debug("history not written yet; kept for the next try", "err", err, "pending", len(pending))
			return pending
		}
		pending = pending[1:]
	}
	return nil
}

// requeueHistory hands entries not written back to the channel, so that
// flushHistory gets one last try at them when Run returns.
func (s *Supervisor) requeueHistory(pending []group.Event) {
	for _, e := range pending {
		select {
		case s.history <- e:
		default:
			return
		}
	}
}

func (s *Supervisor) recordHistory(e group.Event) {
	select {
	case s.history <- e:
	default:
		s.log.Warn("history backlog full; transition not recorded", "to", e.To)
	}
}

// flushHistory writes what the historian has not written yet, bounded by
// one request timeout: the last transitions (stopped, fencing) are the ones
// an operator most wants to read.
func (s *Supervisor) flushHistory() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Etcd.RequestTimeout)
	defer cancel()
	for {
		select {
		case e := <-s.history:
			if group.AppendHistory(ctx, s.cli, s.keys, e, s.cfg.History.Retain) != nil {
				return
			}
		default:
			return
		}
	}
}
