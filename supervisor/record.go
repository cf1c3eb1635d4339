package supervisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// State is a member's lifecycle state.
type State string

// The lifecycle (docs/architecture.md):
//
//	starting -> standby -> promoting -> active -> demoting -> standby
//	                              \          \
//	                               +----------+--> fencing -> (process exits)
const (
	Starting  State = "starting"   // reconciling: stopping whatever runs, publishing the record
	Standby   State = "standby"    // holds nothing; keeps the units stopped; campaigns when allowed
	Promoting State = "promoting"  // holds the election key; barrier, then starting the units
	Active    State = "active"     // holds the key; units running; renewing
	Demoting  State = "demoting"   // stopping the units in order, then releasing the key
	Fencing   State = "fencing"    // lease can no longer be proven: stop, SIGKILL, exit
	Stopped   State = "stopped"    // clean exit after SIGTERM
	Fenced    State = "fenced"     // history only: fencing finished, the process exits
	UnitsDown State = "units-down" // history only: a demotion confirmed its units stopped, before releasing the lease
)

// Holding reports whether a member in this state may have units running
// under its lease, i.e. whether the fence clock governs it.
func (s State) Holding() bool { return s == Promoting || s == Active || s == Demoting }

// Keys is the etcd key layout of one cluster:
//
//	PREFIX/CLUSTER/leader          election key: value = node name, on the election lease;
//	                               its CreateRevision is the fencing token
//	PREFIX/CLUSTER/members/NODE    member record (JSON) on the member's own lease
type Keys struct{ Root string }

// NewKeys returns the layout under prefix for cluster.
func NewKeys(prefix, cluster string) Keys {
	return Keys{Root: path.Join("/", strings.TrimSuffix(prefix, "/"), cluster)}
}

// Leader is the election key.
func (k Keys) Leader() string { return k.Root + "/leader" }

// Members is the prefix of all member records.
func (k Keys) Members() string { return k.Root + "/members/" }

// Member is one member's record key.
func (k Keys) Member(node string) string { return k.Members() + node }

// Record is what each member publishes about itself. Other members read it
// for the promotion barrier and `status`; it lives on the member's own lease,
// separate from the election lease, so it survives a hand-deleted election
// key or a revoked election lease and still tells whether units run.
type Record struct {
	Node         string       `json:"node"`
	Incarnation  string       `json:"incarnation"` // random per process start
	State        State        `json:"state"`
	UnitsRunning bool         `json:"units_running"` // true from before the first start until every unit is confirmed stopped
	Units        []UnitStatus `json:"units,omitempty"`
	Token        int64        `json:"token,omitempty"`         // fencing token while holding the election key
	LeaseLeftMS  int64        `json:"lease_left_ms,omitempty"` // lease time left when published (holder's view)
	Version      string       `json:"version"`
	Since        time.Time    `json:"since"` // wall clock of the last transition
	From         State        `json:"from,omitempty"`
	Reason       string       `json:"reason,omitempty"`
	Released     bool         `json:"released,omitempty"` // the last lease was given up on purpose, not lost
	Cooldown     time.Time    `json:"cooldown_until,omitempty"`
	Host         string       `json:"host,omitempty"`        // os.Hostname of the member, for status
	Published    time.Time    `json:"published"`             // wall clock of this write: status shows the record's age
	Agree        *Agreement   `json:"agree,omitempty"`       // what every member must configure alike (peers.go)
	Fingerprint  string       `json:"fingerprint,omitempty"` // Agree's digest
}

// hostName is this process's host name, for its record.
var hostName, _ = os.Hostname()

// UnitStatus is one unit as the member last saw it.
type UnitStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Health is the unit's health probe state while the leader probes it
	// ([health]: starting, healthy, unhealthy); empty otherwise.
	Health string `json:"health,omitempty"`
}

// ReadMembers returns every live member record, keyed by node.
func ReadMembers(ctx context.Context, cli etcdconn.KV, k Keys) (map[string]Record, int64, error) {
	resp, err := cli.Get(ctx, k.Members(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read member records: %w", err)
	}
	out, _ := decodeMembers(k, resp.Kvs)
	return out, resp.Header.Revision, nil
}

// decodeMembers decodes member records, keyed by node, with the lease each
// lives on.
func decodeMembers(k Keys, kvs []*mvccpb.KeyValue) (map[string]Record, map[string]clientv3.LeaseID) {
	out := make(map[string]Record, len(kvs))
	leases := make(map[string]clientv3.LeaseID, len(kvs))
	for _, kv := range kvs {
		node := strings.TrimPrefix(string(kv.Key), k.Members())
		var r Record
		if err := json.Unmarshal(kv.Value, &r); err != nil || r.Node != node {
			// A record we cannot read might say units run: treat it as
			// running so the barrier waits for it to expire.
			why := fmt.Sprintf("record names node %q", r.Node)
			if err != nil {
				why = err.Error()
			}
			r = Record{Node: node, UnitsRunning: true, Reason: "unreadable record: " + why}
		}
		out[node] = r
		leases[node] = clientv3.LeaseID(kv.Lease)
	}
	return out, leases
}

// LeaderInfo is the election key as read from etcd.
type LeaderInfo struct {
	Node      string
	Token     int64 // CreateRevision of the key
	Lease     clientv3.LeaseID
	Revision  int64 // store revision of the read
	ReadStart time.Time
}

// Present reports whether someone holds the election key.
func (l LeaderInfo) Present() bool { return l.Token != 0 }

// ReadLeader reads the election key.
func ReadLeader(ctx context.Context, cli etcdconn.KV, k Keys) (LeaderInfo, error) {
	start := time.Now()
	resp, err := cli.Get(ctx, k.Leader())
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("read election key %s: %w", k.Leader(), err)
	}
	li := LeaderInfo{Revision: resp.Header.Revision, ReadStart: start}
	if len(resp.Kvs) == 1 {
		kv := resp.Kvs[0]
		li.Node, li.Token, li.Lease = string(kv.Value), kv.CreateRevision, clientv3.LeaseID(kv.Lease)
	}
	return li, nil
}

// blockers returns the members other than self whose records say their
// units may still run: the promotion barrier waits until this is empty.
func blockers(records map[string]Record, self string) []string {
	var out []string
	for n, r := range records {
		if n != self && r.UnitsRunning {
			out = append(out, n)
		}
	}
	return out
}
