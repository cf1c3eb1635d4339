package group

import (
	"context"
	"encoding/json"
	"errors"
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

// Times in the records are RFC 3339 and left out when zero (omitzero):
// versions before it wrote a zero time ("0001-01-01T00:00:00Z") for "no
// expiry", which still decodes to the zero time. Fields are only ever
// added, so a member of either version reads the other's records.

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
	Until  time.Time `json:"until,omitzero"` // zero: until unbanned
}

// Handoff asks the leader holding Token to step down in favour of To (any
// other member when empty). While it stands, only To (any member but From
// when To is empty) may campaign; it lives on a lease that ends at Expires
// so that a switchover nobody can complete does not keep the group
// leaderless.
type Handoff struct {
	ID      string    `json:"id"`
	From    string    `json:"from"`
	To      string    `json:"to,omitempty"`
	Token   int64     `json:"token"`
	At      time.Time `json:"at"`
	Expires time.Time `json:"expires,omitzero"` // zero in requests of older versions (their lease still ends them)
	By      string    `json:"by,omitempty"`
	Reason  string    `json:"reason,omitempty"`

	// Revision is the record's ModRevision as read (not stored): a cancel
	// or a replacement removes exactly the request that was shown.
	Revision int64 `json:"-"`
}

// Pending reports whether the request still applies to the leadership of
// token: the leader it names has not stepped down yet.
func (h Handoff) Pending(token int64) bool { return token != 0 && h.Token == token }

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
		if err := c.apply(k, string(kv.Key), kv.Value, kv.ModRevision); err != nil {
			c.Unreadable = append(c.Unreadable, fmt.Sprintf("%s: %v (ignored; clear it with: etcdctl del %s)", kv.Key, err, kv.Key))
		}
	}
	return c
}

// apply decodes one control record into c; on error c is left unchanged.
func (c *Control) apply(k Keys, key string, value []byte, rev int64) error {
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
		h.Revision = rev
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

// The operator's writes below are conditional transactions that also
// append the operator's history entry (rec, history.go) in the same
// transaction: an action is on record exactly when it took effect, and two
// operators acting at once cannot silently overwrite each other.

// ErrInForce: a request of that kind is already in force; nothing written.
var ErrInForce = errors.New("already in force")

// ErrNotInForce: there is no such request (or it changed since it was
// read); nothing removed.
var ErrNotInForce = errors.New("not in force")

// ErrLeadershipOver: the election key no longer has the request's token.
var ErrLeadershipOver = errors.New("the leadership is over")

// commit runs ops and the history entry rec if every cmp holds; it reports
// whether they did.
func commit(ctx context.Context, cli *clientv3.Client, k Keys, cmps []clientv3.Cmp, ops []clientv3.Op, rec Event) (bool, error) {
	ops = append(ops, historyPut(k, rec))
	resp, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// absent is the comparison that key does not exist.
func absent(key string) clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(key), "=", 0) }

// present is the comparison that key exists.
func present(key string) clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(key), ">", 0) }

// leaseFor grants a lease of ttl for key (none when ttl is 0) and returns
// the put options and a release for when the write did not happen.
func leaseFor(ctx context.Context, cli *clientv3.Client, key string, ttl time.Duration) ([]clientv3.OpOption, func(), error) {
	if ttl <= 0 {
		return nil, func() {}, nil
	}
	g, err := cli.Grant(ctx, TTLSeconds(ttl))
	if err != nil {
		return nil, nil, fmt.Errorf("grant lease for %s: %w", key, err)
	}
	return []clientv3.OpOption{clientv3.WithLease(g.ID)}, func() { _, _ = cli.Revoke(ctx, g.ID) }, nil
}

// SetFreeze puts the group in maintenance mode, recording rec; ErrInForce
// when it is frozen already (the first freeze's reason stays).
func SetFreeze(ctx context.Context, cli *clientv3.Client, k Keys, f Freeze, rec Event) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	ok, err := commit(ctx, cli, k, []clientv3.Cmp{absent(k.Freeze())}, []clientv3.Op{clientv3.OpPut(k.Freeze(), string(b))}, rec)
	return outcome(ok, err, "write "+k.Freeze(), ErrInForce)
}

// Unfreeze ends maintenance mode, recording rec; ErrNotInForce when the
// group is not frozen.
func Unfreeze(ctx context.Context, cli *clientv3.Client, k Keys, rec Event) error {
	ok, err := commit(ctx, cli, k, []clientv3.Cmp{present(k.Freeze())}, []clientv3.Op{clientv3.OpDelete(k.Freeze())}, rec)
	return outcome(ok, err, "delete "+k.Freeze(), ErrNotInForce)
}

// ClearFreeze ends maintenance mode without a record (the lab's clean-up).
func ClearFreeze(ctx context.Context, cli *clientv3.Client, k Keys) error {
	_, err := cli.Delete(ctx, k.Freeze())
	return err
}

// SetBan bans b.Node, recording rec; with a non-zero Until the ban expires
// by itself (it lives on a lease). ErrInForce when the node is banned
// already (that ban stays as it is).
func SetBan(ctx context.Context, cli *clientv3.Client, k Keys, b Ban, rec Event) error {
	var ttl time.Duration
	if !b.Until.IsZero() {
		ttl = time.Until(b.Until)
		if ttl <= 0 {
			return fmt.Errorf("ban of %s would already have expired at %s", b.Node, b.Until.Format(time.RFC3339))
		}
	}
	v, err := json.Marshal(b)
	if err != nil {
		return err
	}
	key := k.Ban(b.Node)
	opts, release, err := leaseFor(ctx, cli, key, ttl)
	if err != nil {
		return err
	}
	ok, err := commit(ctx, cli, k, []clientv3.Cmp{absent(key)}, []clientv3.Op{clientv3.OpPut(key, string(v), opts...)}, rec)
	if !ok {
		release()
	}
	return outcome(ok, err, "write "+key, ErrInForce)
}

// Unban lifts the ban of node, recording rec; ErrNotInForce when node is
// not banned.
func Unban(ctx context.Context, cli *clientv3.Client, k Keys, node string, rec Event) error {
	key := k.Ban(node)
	ok, err := commit(ctx, cli, k, []clientv3.Cmp{present(key)}, []clientv3.Op{clientv3.OpDelete(key)}, rec)
	return outcome(ok, err, "delete "+key, ErrNotInForce)
}

// ClearBan lifts a ban without a record (the lab's clean-up); it reports
// whether one was in force.
func ClearBan(ctx context.Context, cli *clientv3.Client, k Keys, node string) (bool, error) {
	resp, err := cli.Delete(ctx, k.Ban(node))
	if err != nil {
		return false, err
	}
	return resp.Deleted > 0, nil
}

// outcome turns a commit's result into the error its caller returns.
func outcome(ok bool, err error, what string, refused error) error {
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	case !ok:
		return refused
	}
	return nil
}

// RequestHandoff asks the current leader (holder of h.Token) to step down,
// recording rec. The request lives on a lease that ends at h.Expires, so an
// unanswered one goes away; it is written only if the election key still
// has that token, so it can never apply to a later leadership
// (ErrLeadershipOver), and only if no request is in force, or the one in
// force is the request replace (its Revision as read: one whose leadership
// is over, which the caller chose to replace), else ErrInForce.
func RequestHandoff(ctx context.Context, cli *clientv3.Client, k Keys, h Handoff, replace *Handoff, rec Event) error {
	ttl := time.Until(h.Expires)
	if ttl <= 0 {
		return fmt.Errorf("handoff %s would already have expired at %s", h.ID, h.Expires.Format(time.RFC3339))
	}
	v, err := json.Marshal(h)
	if err != nil {
		return err
	}
	opts, release, err := leaseFor(ctx, cli, k.Handoff(), ttl)
	if err != nil {
		return err
	}
	slot := absent(k.Handoff())
	if replace != nil {
		slot = clientv3.Compare(clientv3.ModRevision(k.Handoff()), "=", replace.Revision)
	}
	token := clientv3.Compare(clientv3.CreateRevision(k.Leader()), "=", h.Token)
	resp, err := cli.Txn(ctx).If(token).Then(
		clientv3.OpTxn([]clientv3.Cmp{slot}, []clientv3.Op{clientv3.OpPut(k.Handoff(), string(v), opts...), historyPut(k, rec)}, nil)).Commit()
	switch {
	case err != nil:
		release()
		return fmt.Errorf("write %s: %w", k.Handoff(), err)
	case !resp.Succeeded:
		release()
		return ErrLeadershipOver
	case !resp.Responses[0].GetResponseTxn().Succeeded:
		release()
		return ErrInForce
	}
	return nil
}

// CancelHandoff withdraws the request h (as read: its Revision), recording
// rec; ErrNotInForce when it is gone or was replaced since.
func CancelHandoff(ctx context.Context, cli *clientv3.Client, k Keys, h Handoff, rec Event) error {
	same := clientv3.Compare(clientv3.ModRevision(k.Handoff()), "=", h.Revision)
	ok, err := commit(ctx, cli, k, []clientv3.Cmp{present(k.Handoff()), same}, []clientv3.Op{clientv3.OpDelete(k.Handoff())}, rec)
	return outcome(ok, err, "delete "+k.Handoff(), ErrNotInForce)
}

// ClearHandoff removes the request with id once it is fulfilled (the new
// leader's units are active); a later request stays.
func ClearHandoff(ctx context.Context, cli *clientv3.Client, k Keys, id string) error {
	resp, err := cli.Get(ctx, k.Handoff())
	if err != nil || len(resp.Kvs) != 1 {
		return err
	}
	var h Handoff
	if json.Unmarshal(resp.Kvs[0].Value, &h) != nil || h.ID != id {
		return nil
	}
	_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k.Handoff()), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(k.Handoff())).Commit()
	return err
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
		return fmt.Errorf("%w: token %d; nothing requested", ErrLeadershipOver, token)
	}
	return nil
}
