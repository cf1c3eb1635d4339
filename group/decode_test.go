package group

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func kv(key, value string) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value)}
}

func TestKeysLayout(t *testing.T) {
	for _, prefix := range []string{"/kha", "/kha/", "kha"} {
		k := NewKeys(prefix, "c1")
		got := []string{k.Leader(), k.Member("m1"), k.Freeze(), k.Ban("m2"), k.Handoff(), k.Drill(), k.History()}
		want := []string{"/kha/c1/leader", "/kha/c1/members/m1", "/kha/c1/control/freeze", "/kha/c1/control/ban/m2",
			"/kha/c1/control/handoff", "/kha/c1/control/drill", "/kha/c1/history/"}
		if !slices.Equal(got, want) {
			t.Errorf("prefix %q: %v, want %v", prefix, got, want)
		}
	}
	e := Event{At: time.Unix(0, 42), Node: "m1"}
	if got := NewKeys("/kha", "c1").historyKey(e); got != "/kha/c1/history/00000000000000000042-m1" {
		t.Errorf("history key %q", got)
	}
}

// A control record nobody can read is listed with the command that clears
// it, and the readable ones still count.
func TestParseControl(t *testing.T) {
	k := NewKeys("/kha", "c1")
	c := ParseControl(k, []*mvccpb.KeyValue{
		kv(k.Freeze(), `{"reason":"upgrade","by":"op"}`),
		kv(k.Ban("m2"), `{"node":"ignored","reason":"disk"}`),
		kv(k.Ban("m3"), `not json`),
		kv(k.Handoff(), `{"id":"h1","from":"m1","token":7}`),
		kv(k.Drill(), `{"id":"d1","kind":"failover","token":7}`),
		kv(k.Control()+"unknown", `whatever`),
	})
	if c.Freeze == nil || c.Freeze.Reason != "upgrade" {
		t.Errorf("freeze %+v", c.Freeze)
	}
	if !c.Banned("m2") || c.Bans["m2"].Node != "m2" || c.Banned("m3") {
		t.Errorf("bans %+v (the node comes from the key; an unreadable ban is no ban)", c.Bans)
	}
	if c.Handoff == nil || c.Handoff.Token != 7 || c.Drill == nil || c.Drill.ID != "d1" {
		t.Errorf("handoff %+v, drill %+v", c.Handoff, c.Drill)
	}
	if len(c.Unreadable) != 1 || !strings.Contains(c.Unreadable[0], "etcdctl del "+k.Ban("m3")) {
		t.Errorf("unreadable %q", c.Unreadable)
	}
	if c := ParseControl(k, nil); c.Freeze != nil || c.Bans != nil || c.Handoff != nil || c.Drill != nil || c.Unreadable != nil {
		t.Errorf("empty prefix: %+v", c)
	}
}

// A record that cannot be read, or that names another node, counts as
// units running: the barrier waits for it to expire.
func TestDecodeMembers(t *testing.T) {
	k := NewKeys("/kha", "c1")
	good := kv(k.Member("m1"), `{"node":"m1","state":"active","units_running":true}`)
	good.Lease = 5
	recs, leases := DecodeMembers(k, []*mvccpb.KeyValue{
		good,
		kv(k.Member("m2"), `{"node":"m2","state":"standby"}`),
		kv(k.Member("m3"), `{`),
		kv(k.Member("m4"), `{"node":"m1","state":"standby"}`),
	})
	if r := recs["m1"]; r.State != Active || !r.UnitsRunning || leases["m1"] != clientv3.LeaseID(5) {
		t.Errorf("m1: %+v lease %x", r, leases["m1"])
	}
	if r := recs["m2"]; r.State != Standby || r.UnitsRunning {
		t.Errorf("m2: %+v", r)
	}
	for _, n := range []string{"m3", "m4"} {
		if r := recs[n]; r.Node != n || !r.UnitsRunning || !strings.HasPrefix(r.Reason, "unreadable record: ") {
			t.Errorf("%s: %+v", n, r)
		}
	}
	if got := recs["m4"].Reason; !strings.Contains(got, `names node "m1"`) {
		t.Errorf("m4 reason %q", got)
	}
	b := Blockers(recs, "m1")
	slices.Sort(b)
	if !slices.Equal(b, []string{"m3", "m4"}) {
		t.Errorf("blockers for m1: %v", b)
	}
}

func TestDecodeLeader(t *testing.T) {
	if li := DecodeLeader(nil, 9); li.Present() || li.Revision != 9 {
		t.Errorf("no key: %+v", li)
	}
	key := kv("/kha/c1/leader", "m2")
	key.CreateRevision, key.Lease = 17, 0x42
	li := DecodeLeader([]*mvccpb.KeyValue{key}, 20)
	if !li.Present() || li.Node != "m2" || li.Token != 17 || li.Lease != 0x42 || li.Revision != 20 {
		t.Errorf("key: %+v", li)
	}
}

// Leases are granted in whole seconds, never shorter than asked for.
func TestTTLSeconds(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int64
	}{{0, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {10 * time.Second, 10}, {10*time.Second + 1, 11}} {
		if got := TTLSeconds(c.ttl); got != c.want {
			t.Errorf("TTLSeconds(%v) = %d, want %d", c.ttl, got, c.want)
		}
	}
}

func TestHolding(t *testing.T) {
	for _, s := range []State{Starting, Standby, Promoting, Active, Demoting, Fencing, Stopped, Fenced, UnitsDown} {
		want := s == Promoting || s == Active || s == Demoting
		if s.Holding() != want {
			t.Errorf("%s.Holding() = %v", s, !want)
		}
	}
}

func TestNewID(t *testing.T) {
	a, b := NewID(), NewID()
	if len(a) != 12 || a == b {
		t.Errorf("ids %q %q", a, b)
	}
}

func TestAgreementDifferences(t *testing.T) {
	a := Agreement{Cluster: "c", Prefix: "/kha", Units: []string{"x", "y"}, EtcdCluster: "1"}
	b := a
	b.Units, b.EtcdCluster = []string{"y", "x"}, ""
	if d := a.Differences(b); len(d) != 1 || !strings.HasPrefix(d[0], "units.managed") {
		t.Errorf("differences %q (an unknown etcd cluster is no difference)", d)
	}
	if a.Fingerprint() == b.Fingerprint() || a.Fingerprint() != a.Fingerprint() {
		t.Errorf("fingerprints %s %s", a.Fingerprint(), b.Fingerprint())
	}
}
