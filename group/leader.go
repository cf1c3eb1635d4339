package group

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// LeaderInfo is the election key as read from etcd.
type LeaderInfo struct {
	Node     string
	Token    int64 // CreateRevision of the key
	Lease    clientv3.LeaseID
	Revision int64 // store revision of the read
}

// Present reports whether someone holds the election key.
func (l LeaderInfo) Present() bool { return l.Token != 0 }

// DecodeLeader is the election key as found in kvs (the result of a get of
// Keys.Leader, at store revision rev): nobody holds it unless there is
// exactly one key.
func DecodeLeader(kvs []*mvccpb.KeyValue, rev int64) LeaderInfo {
	li := LeaderInfo{Revision: rev}
	if len(kvs) == 1 {
		kv := kvs[0]
		li.Node, li.Token, li.Lease = string(kv.Value), kv.CreateRevision, clientv3.LeaseID(kv.Lease)
	}
	return li
}

// ReadLeader reads the election key.
func ReadLeader(ctx context.Context, cli Getter, k Keys) (LeaderInfo, error) {
	resp, err := cli.Get(ctx, k.Leader())
	if err != nil {
		return LeaderInfo{}, fmt.Errorf("read election key %s: %w", k.Leader(), err)
	}
	return DecodeLeader(resp.Kvs, resp.Header.Revision), nil
}
