package group

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operator requests live under PREFIX/CLUSTER/control/. Every member reads
// them together with the election key in one transaction, on every watch
// event and every poll, so a request is acted on within one poll interval
// even when a watch was lost.
//
//	control/freeze        maintenance mode: no promotion, no handoff (fencing stays armed)
//	control/ban/NODE      NODE never campaigns (on a lease when it has an expiry)
//	control/handoff       planned switchover requested of the holder of token T
//	control/drill         failover drill: the holder of token T fences as if renewal had failed

// Freeze is the maintenance-mode marker.
type Freeze struct {
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// Ban keeps one node out of the election.
type Ban struct {
	Node   string    `json:"node"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
	Until  time.Time `json:"until,omitempty"` // zero: until unbanned
}

// Handoff asks the leader holding Token to step down in favour of To (any
// other member when empty).
type Handoff struct {
	ID    string    `json:"id"`
	From  string    `json:"from"`
	To    string    `json:"to,omitempty"`
	Token int64     `json:"token"`
	At    time.Time `json:"at"`
}

// Drill asks the leader holding Token to fence exactly as if its renewals
// had failed: no release, so the others must wait out the lease.
type Drill struct {
	ID    string    `json:"id"`
	Kind  string    `json:"kind"` // "failover"
	Token int64     `json:"token"`
	At    time.Time `json:"at"`
}

// Control is every operator request in force.
type Control struct {
	Freeze  *Freeze        `json:"freeze,omitempty"`
	Bans    map[string]Ban `json:"bans,omitempty"`
	Handoff *Handoff       `json:"handoff,omitempty"`
	Drill   *Drill         `json:"drill,omitempty"`
	// Unreadable lists control records that could not be decoded, each
	// with the command that clears it. They are ignored, loudly: a value
	// nobody can read must not freeze the whole group.
	Unreadable []string `json:"unreadable,omitempty"`
}

// Banned reports whether node is banned.
func (c Control) Banned(node string) bool { _, ok := c.Bans[node]; return ok }

// ParseControl decodes the control prefix (the result of a get of
// Keys.Control). A record it cannot decode is
// ignored and listed in Unreadable (the daemon logs it as an ERROR and
// shows it in status): honouring half of it, or refusing to campaign until
// someone notices, would each leave the group without a leader.
func ParseControl(k Keys, kvs []*mvccpb.KeyValue) Control {
	c := Control{}
	for _, kv := range kvs {
		if err := c.apply(k, string(kv.Key), kv.Value); err != nil {
			c.Unreadable = append(c.Unreadable, fmt.Sprintf("%s: %v (ignored; clear it with: etcdctl del %s)", kv.Key, err, kv.Key))
		}
	}
	return c
}

// apply decodes one control record into c; on error c is left unchanged.
func (c *Control) apply(k Keys, key string, value []byte) error {
	switch {
	case key == k.Freeze():
		var f Freeze
		if err := json.Unmarshal(value, &f); err != nil {
			return err
		}
		c.Freeze = &f
	case key == k.Handoff():
		var h Handoff
		if err := json.Unmarshal(value, &h); err != nil {
			return err
		}
		c.Handoff = &h
	case key == k.Drill():
		var d Drill
		if err := json.Unmarshal(value, &d); err != nil {
			return err
		}
		c.Drill = &d
	case strings.HasPrefix(key, k.Ban("")):
		var b Ban
		if err := json.Unmarshal(value, &b); err != nil {
			return err
		}
		if c.Bans == nil {
			c.Bans = map[string]Ban{}
		}
		b.Node = strings.TrimPrefix(key, k.Ban(""))
		c.Bans[b.Node] = b
	}
	return nil
}

// ReadControl reads every operator request.
func ReadControl(ctx context.Context, cli *clientv3.Client, k Keys) (Control, error) {
	resp, err := cli.Get(ctx, k.Control(), clientv3.WithPrefix())
	if err != nil {
		return Control{}, fmt.Errorf("read control records: %w", err)
	}
	return ParseControl(k, resp.Kvs), nil
}

// putJSON writes v at key, on a fresh lease of ttl when ttl > 0.
func putJSON(ctx context.Context, cli *clientv3.Client, key string, v any, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var opts []clientv3.OpOption
	if ttl > 0 {
		g, err := cli.Grant(ctx, TTLSeconds(ttl))
		if err != nil {
			return fmt.Errorf("grant lease for %s: %w", key, err)
		}
		opts = append(opts, clientv3.WithLease(g.ID))
	}
	if _, err := cli.Put(ctx, key, string(b), opts...); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	return nil
}

// SetFreeze puts the group in maintenance mode.
func SetFreeze(ctx context.Context, cli *clientv3.Client, k Keys, f Freeze) error {
	return putJSON(ctx, cli, k.Freeze(), f, 0)
}

// ClearFreeze ends maintenance mode.
func ClearFreeze(ctx context.Context, cli *clientv3.Client, k Keys) error {
	_, err := cli.Delete(ctx, k.Freeze())
	return err
}

// SetBan bans b.Node; with a non-zero Until the ban expires by itself
// (it lives on a lease).
func SetBan(ctx context.Context, cli *clientv3.Client, k Keys, b Ban) error {
	var ttl time.Duration
	if !b.Until.IsZero() {
		ttl = time.Until(b.Until)
		if ttl <= 0 {
			return fmt.Errorf("ban of %s would already have expired at %s", b.Node, b.Until.Format(time.RFC3339))
		}
	}
	return putJSON(ctx, cli, k.Ban(b.Node), b, ttl)
}

// ClearBan lifts a ban; it reports whether one was in force.
func ClearBan(ctx context.Context, cli *clientv3.Client, k Keys, node string) (bool, error) {
	resp, err := cli.Delete(ctx, k.Ban(node))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// RequestHandoff asks the current leader (holder of h.Token) to step down.
// The request lives on a lease of ttl so an unanswered one goes away; it is
// written only if the election key still has that token, so it can never
// apply to a later leadership.
func RequestHandoff(ctx context.Context, cli *clientv3.Client, k Keys, h Handoff, ttl time.Duration) error {
	return putIfToken(ctx, cli, k, k.Handoff(), h, h.Token, ttl)
}

// RequestDrill asks the current leader (holder of d.Token) to fence.
func RequestDrill(ctx context.Context, cli *clientv3.Client, k Keys, d Drill, ttl time.Duration) error {
	return putIfToken(ctx, cli, k, k.Drill(), d, d.Token, ttl)
}

func putIfToken(ctx context.Context, cli *clientv3.Client, k Keys, key string, v any, token int64, ttl time.Duration) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	g, err := cli.Grant(ctx, TTLSeconds(ttl))
	if err != nil {
		return fmt.Errorf("grant lease for %s: %w", key, err)
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k.Leader()), "=", token)).
		Then(clientv3.OpPut(key, string(b), clientv3.WithLease(g.ID))).Commit()
	if err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	if !resp.Succeeded {
		_, _ = cli.Revoke(ctx, g.ID)
		return fmt.Errorf("the leadership with token %d is over; nothing requested", token)
	}
	return nil
}
