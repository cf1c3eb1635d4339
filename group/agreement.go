package group

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
)

// Agreement is what every member of a group must configure alike. A
// member with a different cluster or prefix writes elsewhere and is never
// seen (that is what the peers list is for); one with other managed units
// or another etcd cluster is seen, and must be reported.
type Agreement struct {
	Cluster     string   `json:"cluster"`
	Prefix      string   `json:"prefix"` // normalised, as the keys use it
	Units       []string `json:"units"`
	EtcdCluster string   `json:"etcd_cluster,omitempty"` // hex; empty while unknown
}

// Fingerprint is a short digest of the agreement, for logs and records.
func (a Agreement) Fingerprint() string {
	b, _ := json.Marshal(a)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// Differences names each field where b disagrees with a (an unknown etcd
// cluster ID on either side is no disagreement).
func (a Agreement) Differences(b Agreement) []string {
	var out []string
	if a.Cluster != b.Cluster {
		out = append(out, fmt.Sprintf("cluster %q, ours %q", b.Cluster, a.Cluster))
	}
	if a.Prefix != b.Prefix {
		out = append(out, fmt.Sprintf("etcd.prefix %q, ours %q", b.Prefix, a.Prefix))
	}
	if !slices.Equal(a.Units, b.Units) {
		out = append(out, fmt.Sprintf("units.managed %v, ours %v", b.Units, a.Units))
	}
	if a.EtcdCluster != "" && b.EtcdCluster != "" && a.EtcdCluster != b.EtcdCluster {
		out = append(out, fmt.Sprintf("etcd cluster %s, ours %s", b.EtcdCluster, a.EtcdCluster))
	}
	return out
}
