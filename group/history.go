package group

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Event is one entry of the history kept in etcd: a member's transition,
// or an operator's action.
//
// A transition has From and To and no By. An operator's action (freeze,
// unfreeze, ban, unban, handoff, handoff-cancel, handoff-wait, drill-failover,
// drill-result: the Kind) has By (user@host), the node it concerns if any,
// the operator's reason, and its Outcome; From and To are empty, so older
// readers, which look for transitions by To, pass over it.
type Event struct {
	At      time.Time `json:"at"`
	Node    string    `json:"node"`
	From    State     `json:"from"`
	To      State     `json:"to"`
	Kind    string    `json:"kind"`
	Reason  string    `json:"reason"`
	Token   int64     `json:"token,omitempty"`
	By      string    `json:"by,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
}

// Operator reports whether e is an operator's action.
func (e Event) Operator() bool { return e.By != "" }

// historyPut is the write of e into the history.
func historyPut(k Keys, e Event) clientv3.Op {
	b, _ := json.Marshal(e)
	return clientv3.OpPut(k.historyKey(e), string(b))
}

// AppendHistory writes e and trims the history to the newest retain
// entries.
func AppendHistory(ctx context.Context, cli *clientv3.Client, k Keys, e Event, retain int) error {
	if _, err := cli.Do(ctx, historyPut(k, e)); err != nil {
		return fmt.Errorf("append history: %w", err)
	}
	return TrimHistory(ctx, cli, k, retain)
}

// TrimHistory deletes all but the newest retain entries.
func TrimHistory(ctx context.Context, cli *clientv3.Client, k Keys, retain int) error {
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
