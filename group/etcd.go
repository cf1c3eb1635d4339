package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Getter is the read this package needs: *clientv3.Client has it, and so
// does the daemon's hedged pool (supervisor/etcdconn.KV), which this package
// must not import (it would bring the daemon's dependencies to the CLI and
// the lab).
type Getter interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
}

// TTLSeconds is ttl in the whole seconds etcd grants a lease in, rounded
// up: a lease is never shorter than asked for.
func TTLSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// NewID returns a short random identifier: of a request (handoff, drill),
// and of a member's process start (Record.Incarnation).
func NewID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
