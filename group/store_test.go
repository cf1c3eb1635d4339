package group_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
)

// One real etcd member for every read and write of the stored group.
func TestStoreAgainstEtcd(t *testing.T) {
	cli := etcdtest.NewCluster(t, etcdtest.Options{}).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := group.NewKeys("/kha", "c1")
	t.Run("leader and members", func(t *testing.T) { leaderAndMembers(ctx, t, cli, k) })
	t.Run("control", func(t *testing.T) { control(ctx, t, cli, k) })
	t.Run("history", func(t *testing.T) { history(ctx, t, cli, k) })
}

func leaderAndMembers(ctx context.Context, t *testing.T, cli *clientv3.Client, k group.Keys) {
	if cs, err := group.ReadCluster(ctx, cli, k, "c1"); err != nil || cs.Leader != "" || cs.Token != 0 || len(cs.Members) != 0 {
		t.Fatalf("empty group: %+v, %v", cs, err)
	}
	lease, err := cli.Grant(ctx, group.TTLSeconds(9500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, k.Leader(), "m2", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	for node, r := range map[string]string{"m2": `{"node":"m2","state":"active","units_running":true}`, "m1": `{"node":"m1","state":"standby"}`} {
		if _, err := cli.Put(ctx, k.Member(node), r); err != nil {
			t.Fatal(err)
		}
	}
	li, err := group.ReadLeader(ctx, cli, k)
	if err != nil || li.Node != "m2" || li.Token != put.Header.Revision || li.Lease != lease.ID {
		t.Fatalf("leader %+v, %v (put at revision %d)", li, err, put.Header.Revision)
	}
	recs, rev, err := group.ReadMembers(ctx, cli, k)
	if err != nil || len(recs) != 2 || recs["m2"].State != group.Active || rev <= put.Header.Revision {
		t.Fatalf("members %+v at %d, %v", recs, rev, err)
	}
	cs, err := group.ReadCluster(ctx, cli, k, "c1")
	if err != nil || cs.Leader != "m2" || cs.Token != li.Token || len(cs.Members) != 2 || cs.Members[0].Node != "m1" {
		t.Fatalf("cluster %+v, %v", cs, err)
	}
	if cs.LeaseLeft <= 0 || cs.LeaseLeft > 10*time.Second {
		t.Fatalf("lease left %v, want (0, 10s]", cs.LeaseLeft)
	}
	// A lease asked for 9.5 s is granted 10 s (rounded up, never down).
	if ttl := keyTTL(ctx, t, cli, k.Leader()); ttl != 10 {
		t.Fatalf("election lease granted %d s, want 10", ttl)
	}
}

// op is an operator's history entry for the store tests.
func op(kind, node string) group.Event {
	return group.Event{At: time.Now(), Node: node, Kind: kind, By: "alice@m1", Outcome: "done"}
}

func control(ctx context.Context, t *testing.T, cli *clientv3.Client, k group.Keys) {
	if err := group.SetFreeze(ctx, cli, k, group.Freeze{Reason: "upgrade", At: time.Now()}, op("freeze", "")); err != nil {
		t.Fatal(err)
	}
	// A second freeze does not replace the first one's reason.
	if err := group.SetFreeze(ctx, cli, k, group.Freeze{Reason: "other", At: time.Now()}, op("freeze", "")); !errors.Is(err, group.ErrInForce) {
		t.Fatalf("second freeze: %v, want ErrInForce", err)
	}
	until := time.Now().Add(time.Hour)
	if err := group.SetBan(ctx, cli, k, group.Ban{Node: "m3", Until: until}, op("ban", "m3")); err != nil {
		t.Fatal(err)
	}
	if err := group.SetBan(ctx, cli, k, group.Ban{Node: "m4"}, op("ban", "m4")); err != nil {
		t.Fatal(err)
	}
	if err := group.SetBan(ctx, cli, k, group.Ban{Node: "m4", Reason: "again"}, op("ban", "m4")); !errors.Is(err, group.ErrInForce) {
		t.Fatalf("second ban: %v, want ErrInForce", err)
	}
	err := group.SetBan(ctx, cli, k, group.Ban{Node: "m5", Until: time.Now().Add(-time.Second)}, op("ban", "m5"))
	if err == nil || !strings.Contains(err.Error(), "would already have expired") {
		t.Fatalf("ban in the past: %v", err)
	}
	c, err := group.ReadControl(ctx, cli, k)
	if err != nil || c.Freeze == nil || c.Freeze.Reason != "upgrade" || !c.Banned("m3") || !c.Banned("m4") || c.Banned("m5") || c.Bans["m4"].Reason != "" {
		t.Fatalf("control %+v, %v", c, err)
	}
	// A ban with an expiry lives on a lease of about that long; one
	// without lives forever, and its record has no "until" at all.
	if ttl := keyTTL(ctx, t, cli, k.Ban("m3")); ttl < 3590 || ttl > 3600 {
		t.Fatalf("timed ban on a lease of %d s, want about 3600", ttl)
	}
	if ttl := keyTTL(ctx, t, cli, k.Ban("m4")); ttl != -1 {
		t.Fatalf("ban without expiry on a lease (%d s)", ttl)
	}
	if raw := rawValue(ctx, t, cli, k.Ban("m4")); strings.Contains(raw, "until") {
		t.Fatalf("open-ended ban stored with an until: %s", raw)
	}
	if err := group.Unban(ctx, cli, k, "m4", op("unban", "m4")); err != nil {
		t.Fatalf("unban: %v", err)
	}
	if err := group.Unban(ctx, cli, k, "m4", op("unban", "m4")); !errors.Is(err, group.ErrNotInForce) {
		t.Fatalf("unban twice: %v, want ErrNotInForce", err)
	}
	if ok, err := group.ClearBan(ctx, cli, k, "m3"); !ok || err != nil {
		t.Fatalf("clear ban: %v, %v", ok, err)
	}
	if err := group.Unfreeze(ctx, cli, k, op("unfreeze", "")); err != nil {
		t.Fatal(err)
	}
	if err := group.Unfreeze(ctx, cli, k, op("unfreeze", "")); !errors.Is(err, group.ErrNotInForce) {
		t.Fatalf("unfreeze twice: %v, want ErrNotInForce", err)
	}
	handoffs(ctx, t, cli, k)
	// Exactly the actions that took effect are on record, apart from the
	// transitions (no From, no To), in order.
	var kinds []string
	evs, err := group.ReadHistory(ctx, cli, k, 0)
	for _, e := range evs {
		if e.Operator() && e.From == "" && e.To == "" {
			kinds = append(kinds, e.Kind)
		}
	}
	want := "freeze ban ban unban unfreeze handoff handoff-cancel handoff"
	if err != nil || strings.Join(kinds, " ") != want {
		t.Fatalf("operator actions on record %v, %v; want %s", kinds, err, want)
	}
	if _, err := cli.Delete(ctx, k.History(), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// handoffs: a handoff or a drill is written only for the leadership it
// names, only when no request stands (or the one that stands is the one
// replaced), on a lease ending at its expiry, and a cancel removes exactly
// the request that was read.
func handoffs(ctx context.Context, t *testing.T, cli *clientv3.Client, k group.Keys) {
	li, err := group.ReadLeader(ctx, cli, k)
	if err != nil || !li.Present() {
		t.Fatalf("leader %+v, %v", li, err)
	}
	soon := time.Now().Add(5 * time.Second)
	err = group.RequestHandoff(ctx, cli, k, group.Handoff{ID: group.NewID(), From: li.Node, Token: li.Token + 1, Expires: soon}, nil, op("handoff", li.Node))
	if !errors.Is(err, group.ErrLeadershipOver) {
		t.Fatalf("handoff for a later token: %v", err)
	}
	h1 := group.Handoff{ID: "h1", From: li.Node, Token: li.Token, Expires: time.Now().Add(1500 * time.Millisecond)}
	if err := group.RequestHandoff(ctx, cli, k, h1, nil, op("handoff", li.Node)); err != nil {
		t.Fatal(err)
	}
	if err := group.RequestHandoff(ctx, cli, k, group.Handoff{ID: "h2", From: li.Node, Token: li.Token, Expires: soon}, nil, op("handoff", li.Node)); !errors.Is(err, group.ErrInForce) {
		t.Fatalf("second handoff: %v, want ErrInForce", err)
	}
	if err := group.RequestDrill(ctx, cli, k, group.Drill{ID: "d1", Kind: "failover", Token: li.Token}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := group.ReadControl(ctx, cli, k)
	if err != nil || c.Freeze != nil || c.Banned("m4") || c.Handoff == nil || c.Handoff.ID != "h1" || c.Handoff.Revision == 0 || c.Drill == nil || c.Drill.ID != "d1" {
		t.Fatalf("control %+v, %v", c, err)
	}
	if ttl := keyTTL(ctx, t, cli, k.Handoff()); ttl != 2 {
		t.Fatalf("handoff expiring in 1.5 s is on a lease of %d s, want 2 (rounded up)", ttl)
	}
	stale := *c.Handoff
	if err := group.CancelHandoff(ctx, cli, k, stale, op("handoff-cancel", li.Node)); err != nil {
		t.Fatal(err)
	}
	if err := group.CancelHandoff(ctx, cli, k, stale, op("handoff-cancel", li.Node)); !errors.Is(err, group.ErrNotInForce) {
		t.Fatalf("cancel twice: %v, want ErrNotInForce", err)
	}
	// Replacing: only the request that was read.
	if err := group.RequestHandoff(ctx, cli, k, group.Handoff{ID: "h3", From: li.Node, Token: li.Token, Expires: soon}, &stale, op("handoff", li.Node)); !errors.Is(err, group.ErrInForce) {
		t.Fatalf("replacing a request that is gone: %v, want ErrInForce", err)
	}
	if err := group.RequestHandoff(ctx, cli, k, group.Handoff{ID: "h4", From: li.Node, Token: li.Token, Expires: soon}, nil, op("handoff", li.Node)); err != nil {
		t.Fatal(err)
	}
	if err := group.ClearHandoff(ctx, cli, k, "h1"); err != nil {
		t.Fatal(err)
	}
	if c, _ := group.ReadControl(ctx, cli, k); c.Handoff == nil || c.Handoff.ID != "h4" {
		t.Fatalf("clearing a fulfilled h1 removed the later request: %+v", c.Handoff)
	}
	if err := group.ClearHandoff(ctx, cli, k, "h4"); err != nil {
		t.Fatal(err)
	}
	if c, _ := group.ReadControl(ctx, cli, k); c.Handoff != nil {
		t.Fatalf("fulfilled h4 not cleared: %+v", c.Handoff)
	}
}

// rawValue is key's stored value.
func rawValue(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) string {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(resp.Kvs[0].Value)
}

// keyTTL is the granted TTL of key's lease, -1 without one.
func keyTTL(ctx context.Context, t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v", key, err)
	}
	if resp.Kvs[0].Lease == 0 {
		return -1
	}
	ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	if err != nil {
		t.Fatal(err)
	}
	return ttl.GrantedTTL
}

func history(ctx context.Context, t *testing.T, cli *clientv3.Client, k group.Keys) {
	t0 := time.Now()
	for i := range 5 {
		e := group.Event{At: t0.Add(time.Duration(i) * time.Second), Node: "m1", From: group.Standby, To: group.Promoting, Reason: string(rune('a' + i))}
		if err := group.AppendHistory(ctx, cli, k, e, 3); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := group.ReadHistory(ctx, cli, k, 0)
	if err != nil || len(evs) != 3 || evs[0].Reason != "c" || evs[2].Reason != "e" {
		t.Fatalf("history kept %+v, %v; want the newest 3, oldest first", evs, err)
	}
	if evs, err = group.ReadHistory(ctx, cli, k, 2); err != nil || len(evs) != 2 || evs[0].Reason != "d" || evs[1].Reason != "e" {
		t.Fatalf("newest 2: %+v, %v", evs, err)
	}
	if _, err := cli.Put(ctx, k.History()+"99999999999999999999-bad", "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := group.ReadHistory(ctx, cli, k, 0); err == nil || !strings.Contains(err.Error(), "-bad") {
		t.Fatalf("unreadable history entry: %v", err)
	}
}
