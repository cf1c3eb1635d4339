package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one entry of the transition history kept in etcd.
type Event struct {
	At     time.Time `json:"at"`
	Node   string    `json:"node"`
	From   State     `json:"from"`
	To     State     `json:"to"`
	Kind   string    `json:"kind"`
	Reason string    `json:"reason"`
	Token  int64     `json:"token,omitempty"`
}

// historyKey sorts by time first (zero-padded nanoseconds), then node.
func (k Keys) historyKey(e Event) string {
	return fmt.Sprintf("%s%020d-%s", k.History(), e.At.UnixNano(), e.Node)
}

// AppendHistory writes e and trims the history to the newest retain
// entries.
func AppendHistory(ctx context.Context, cli *clientv3.Client, k Keys, e Event, retain int) error {
	b, _ := json.Marshal(e)
	if _, err := cli.Put(ctx, k.historyKey(e), string(b)); err != nil {
		return fmt.Errorf("append history: %w", err)
	}
	cnt, err := cli.Get(ctx, k.History(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count history: %w", err)
	}
	excess := cnt.Count - int64(retain)
	if excess <= 0 {
		return nil
	}
	old, err := cli.Get(ctx, k.History(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(excess))
	if err != nil || len(old.Kvs) == 0 {
		return err
	}
	last := string(old.Kvs[len(old.Kvs)-1].Key)
	_, err = cli.Delete(ctx, k.History(), clientv3.WithRange(last+"\x00"))
	return err
}

// ReadHistory returns the newest limit events, oldest first (all when
// limit <= 0).
func ReadHistory(ctx context.Context, cli *clientv3.Client, k Keys, limit int) ([]Event, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := cli.Get(ctx, k.History(), opts...)
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	out := make([]Event, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var e Event
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return nil, fmt.Errorf("history entry %s: %w", kv.Key, err)
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// historyBacklog bounds the entries kept while etcd does not answer; the
// oldest go first when it is full.
const historyBacklog = 256

// historian appends this member's transitions off the loop, the loop never
// waits for it. An entry etcd does not take (a partition, an outage) is
// kept, with its original time, and written when etcd answers again.
func (s *Supervisor) historian(bg context.Context) {
	var pending []Event
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
			retry.Reset(s.cfg.Units.PollInterval.D())
		}
	}
}

// writeHistory appends pending in order and returns what etcd did not take.
func (s *Supervisor) writeHistory(bg context.Context, pending []Event) []Event {
	for len(pending) > 0 {
		ctx, cancel := s.reqCtx(bg)
		err := AppendHistory(ctx, s.cli, s.keys, pending[0], s.cfg.History.Retain)
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
func (s *Supervisor) requeueHistory(pending []Event) {
	for _, e := range pending {
		select {
		case s.history <- e:
		default:
			return
		}
	}
}

func (s *Supervisor) recordHistory(e Event) {
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
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Etcd.RequestTimeout.D())
	defer cancel()
	for {
		select {
		case e := <-s.history:
			if AppendHistory(ctx, s.cli, s.keys, e, s.cfg.History.Retain) != nil {
				return
			}
		default:
			return
		}
	}
}
