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

// State is a member's lifecycle state.
type State string

// The states a record can carry. Which transitions the daemon takes between
// them is its own (supervisor/state.go and docs/architecture.md, "The
// lifecycle"); readers here only compare them.
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
	Cooldown     time.Time    `json:"cooldown_until,omitzero"`
	Host         string       `json:"host,omitempty"`        // os.Hostname of the member, for status
	Published    time.Time    `json:"published"`             // wall clock of this write: status shows the record's age
	Agree        *Agreement   `json:"agree,omitempty"`       // what every member must configure alike (agreement.go)
	Fingerprint  string       `json:"fingerprint,omitempty"` // Agree's digest

	// APIFence is the fence at the API server (apifence.go); nil when off.
	APIFence *APIFence `json:"api_fence,omitempty"`
	// Timing is the member's lease timing; nil in records of versions
	// before it.
	Timing *Timing `json:"timing,omitempty"`
}

// UnitStatus is one unit as the member last saw it.
type UnitStatus struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Health is the unit's health probe state while the leader probes it
	// ([health]: starting, healthy, unhealthy); empty otherwise.
	Health string `json:"health,omitempty"`
}

// ReadMembers returns every live member record, keyed by node.
func ReadMembers(ctx context.Context, cli Getter, k Keys) (map[string]Record, int64, error) {
	resp, err := cli.Get(ctx, k.Members(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read member records: %w", err)
	}
	out, _ := DecodeMembers(k, resp.Kvs)
	return out, resp.Header.Revision, nil
}

// DecodeMembers decodes member records (the result of a get of the
// Members prefix), keyed by node, with the lease each lives on. A record it
// cannot decode, or one filed under another node's key, comes back as
// running units with the reason in Reason.
func DecodeMembers(k Keys, kvs []*mvccpb.KeyValue) (map[string]Record, map[string]clientv3.LeaseID) {
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

// Blockers returns the members other than self whose records say their
// units may still run: the daemon's promotion barrier waits until this is
// empty.
func Blockers(records map[string]Record, self string) []string {
	var out []string
	for n, r := range records {
		if n != self && r.UnitsRunning {
			out = append(out, n)
		}
	}
	return out
}

// APIFence is the fence at the API server as the member last knew it
// (nil in the record when the fence is off): the cluster status table and
// drill read it.
type APIFence struct {
	Mode        string    `json:"mode"`
	Token       int64     `json:"token,omitempty"` // held by the apiservers, as this member last knew
	Published   int64     `json:"published,omitempty"`
	PublishedAt time.Time `json:"published_at,omitzero"`
	TookMS      int64     `json:"took_ms,omitempty"`
	// Unfenced: apiservers that admitted a stale token at this member's
	// last self-check (leader); Unlisted: apiservers the cluster knows and
	// its api_fence.apiservers lacks.
	Unfenced []string `json:"apiservers_unfenced,omitempty"`
	Unlisted []string `json:"apiservers_unlisted,omitempty"`
	// WebhookOff: what is wrong with the token webhook's registration at
	// this member's last self-check (leader; "" in force or not checked).
	WebhookOff string `json:"webhook_off,omitempty"`
}

// Timing is what another member needs of a member's timing to reason about
// its lease (supervisor: the barrier's proofs and blind wait): with members
// on different profiles, as during a change of profile node by node, each
// proof must hold for the member it is about, not only for the reader.
type Timing struct {
	TTLMS int64 `json:"ttl_ms"` // lease.ttl
	// ProofMarginMS is S_max + lease.slack: once its lease has less than
	// this left, the member is past its fence instant.
	ProofMarginMS int64 `json:"proof_margin_ms"`
}
