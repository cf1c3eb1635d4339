package group

import (
	"context"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterStatus is the group as etcd sees it, readable from any node with
// the configuration: who holds the election key and what every member
// last published.
type ClusterStatus struct {
	Cluster string `json:"cluster"`
	Leader  string `json:"leader,omitempty"`
	Token   int64  `json:"token,omitempty"`
	// LeaseLeft is etcd's view of the election lease's remaining TTL; JSON
	// carries it as lease_left_ms, the unit of every duration the group's
	// JSON has (versions before wrote nanoseconds as lease_left_ns).
	LeaseLeft   time.Duration `json:"-"`
	LeaseLeftMS int64         `json:"lease_left_ms,omitempty"`
	Members     []Record      `json:"members"`
	Control     Control       `json:"control"`
	Revision    int64         `json:"revision"`
}

// ReadCluster reads the election key, its lease's remaining TTL and every
// member record.
func ReadCluster(ctx context.Context, cli *clientv3.Client, k Keys, cluster string) (ClusterStatus, error) {
	cs := ClusterStatus{Cluster: cluster, Members: []Record{}}
	li, err := ReadLeader(ctx, cli, k)
	if err != nil {
		return cs, err
	}
	cs.Leader, cs.Token, cs.Revision = li.Node, li.Token, li.Revision
	if li.Present() && li.Lease != 0 {
		ttl, err := cli.TimeToLive(ctx, li.Lease)
		if err != nil {
			return cs, fmt.Errorf("read election lease: %w", err)
		}
		cs.LeaseLeft = time.Duration(ttl.TTL) * time.Second
		cs.LeaseLeftMS = cs.LeaseLeft.Milliseconds()
	}
	recs, _, err := ReadMembers(ctx, cli, k)
	if err != nil {
		return cs, err
	}
	if cs.Control, err = ReadControl(ctx, cli, k); err != nil {
		return cs, err
	}
	for _, r := range recs {
		cs.Members = append(cs.Members, r)
	}
	sort.Slice(cs.Members, func(i, j int) bool { return cs.Members[i].Node < cs.Members[j].Node })
	return cs, nil
}
