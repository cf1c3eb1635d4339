package group

import (
	"encoding/json"
	"fmt"
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

// A group being upgraded has members and operators of both versions: the
// records the previous version wrote must read as before, and what this
// version writes must read in the previous version's types (copied below
// as they were) with the meaning unchanged.
func TestControlAndHistoryAcrossVersions(t *testing.T) {
	k := NewKeys("/kha", "c1")
	// As the previous version stored them: a zero "until" for an
	// open-ended ban, a handoff without expiry, by or reason.
	c := ParseControl(k, []*mvccpb.KeyValue{
		kv(k.Ban("m2"), `{"node":"m2","reason":"disk","by":"op@h","at":"2026-12-01T10:00:00Z","until":"0001-01-01T00:00:00Z"}`),
		{Key: []byte(k.Handoff()), Value: []byte(`{"id":"h1","from":"m1","to":"m2","token":7,"at":"2026-12-01T10:00:00Z"}`), ModRevision: 42},
	})
	if b := c.Bans["m2"]; !b.Until.IsZero() || b.Reason != "disk" || len(c.Unreadable) != 0 {
		t.Fatalf("old ban read as %+v (%v)", b, c.Unreadable)
	}
	if h := c.Handoff; h == nil || h.ID != "h1" || !h.Expires.IsZero() || h.Revision != 42 || !h.Pending(7) || h.Pending(8) || h.Pending(0) {
		t.Fatalf("old handoff read as %+v", h)
	}
	var old Event
	if err := json.Unmarshal([]byte(`{"at":"2026-12-01T10:00:00Z","node":"m1","from":"standby","to":"promoting","kind":"elected","reason":"won","token":7}`), &old); err != nil || old.Operator() {
		t.Fatalf("old transition read as %+v, %v", old, err)
	}

	// What this version writes, as the previous version reads it.
	type prevBan struct {
		Node   string    `json:"node"`
		Reason string    `json:"reason,omitempty"`
		By     string    `json:"by,omitempty"`
		At     time.Time `json:"at"`
		Until  time.Time `json:"until,omitempty"`
	}
	type prevHandoff struct {
		ID    string    `json:"id"`
		From  string    `json:"from"`
		To    string    `json:"to,omitempty"`
		Token int64     `json:"token"`
		At    time.Time `json:"at"`
	}
	type prevEvent struct {
		At     time.Time `json:"at"`
		Node   string    `json:"node"`
		From   State     `json:"from"`
		To     State     `json:"to"`
		Kind   string    `json:"kind"`
		Reason string    `json:"reason"`
		Token  int64     `json:"token,omitempty"`
	}
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	nb, _ := json.Marshal(Ban{Node: "m2", Reason: "disk", By: "op@h", At: at})
	if strings.Contains(string(nb), "until") || strings.Contains(string(nb), "0001-01-01") {
		t.Fatalf("open-ended ban written with a zero until: %s", nb)
	}
	var pb prevBan
	if err := json.Unmarshal(nb, &pb); err != nil || !pb.Until.IsZero() || pb.Node != "m2" || !pb.At.Equal(at) {
		t.Fatalf("new ban %s read by the previous version as %+v, %v", nb, pb, err)
	}
	nh, _ := json.Marshal(Handoff{ID: "h2", From: "m1", To: "m2", Token: 9, At: at, Expires: at.Add(time.Minute), By: "op@h", Reason: "patch", Revision: 5})
	var ph prevHandoff
	if err := json.Unmarshal(nh, &ph); err != nil || ph != (prevHandoff{ID: "h2", From: "m1", To: "m2", Token: 9, At: at}) || strings.Contains(string(nh), "evision") {
		t.Fatalf("new handoff %s read by the previous version as %+v, %v", nh, ph, err)
	}
	// An operator's action has no From and no To: the previous version's
	// readers, which look for transitions by To (drill, fence metrics,
	// the predecessor's fence), pass over it.
	ne, _ := json.Marshal(Event{At: at, Node: "m2", Kind: "ban", Reason: "disk", By: "op@h", Outcome: "done"})
	var pe prevEvent
	if err := json.Unmarshal(ne, &pe); err != nil || pe.To != "" || pe.From != "" || pe.Kind != "ban" {
		t.Fatalf("new operator event %s read by the previous version as %+v, %v", ne, pe, err)
	}
	// It sorts by time with the transitions and never takes the key of
	// the node's own transition at the same instant.
	tr, act := k.historyKey(Event{At: at, Node: "m2"}), k.historyKey(Event{At: at, Node: "m2", Kind: "ban", By: "op@h"})
	if tr == act || !strings.HasPrefix(act, k.History()+fmt.Sprintf("%020d-", at.UnixNano())) {
		t.Fatalf("history keys: transition %s, action %s", tr, act)
	}
}

// A record's and a cluster's JSON carry no zero times and milliseconds
// only.
func TestStatusJSONUnits(t *testing.T) {
	b, _ := json.Marshal(ClusterStatus{Cluster: "c1", LeaseLeft: 3 * time.Second, LeaseLeftMS: 3000,
		Members: []Record{{Node: "m1", Since: time.Unix(1, 0), Published: time.Unix(2, 0), APIFence: &APIFence{Mode: "token"}}}})
	s := string(b)
	if strings.Contains(s, "0001-01-01") || strings.Contains(s, "_ns") || !strings.Contains(s, `"lease_left_ms":3000`) {
		t.Fatalf("status JSON %s", s)
	}
}
