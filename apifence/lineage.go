package apifence

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// The token is the election key's create revision in kha's etcd, so a
// token means something only within one etcd cluster's history. The
// parameter records which (data.etcd_cluster, the cluster ID in hex)
// beside the group's name (data.group).

// EtcdState is kha's etcd as the promoting node sees it.
type EtcdState struct {
	ClusterID uint64
	Revision  int64 // the store's current revision
}

// EtcdFunc reads EtcdState (a linearizable read: the header of any Get).
type EtcdFunc func(ctx context.Context) (EtcdState, error)

// etcdClusterKey is the parameter's record of the etcd cluster.
const etcdClusterKey = "etcd_cluster"

// ErrRestored means the parameter holds a token above the current
// revision of this node's etcd: no term of this etcd issued it. kha's etcd
// was restored from a snapshot without --bump-revision (or replaced), and
// every new term's token stays below the parameter's: every promotion
// would fail with ErrNewerToken until someone acts. Errors with it also
// match ErrNewerToken.
var ErrRestored = errors.New("kha's etcd is behind the parameter's token")

// checkLineage refuses a parameter recorded by another etcd cluster and
// explains a token ahead of this etcd's history. st is nil when the
// publisher does not know its etcd (then only the group name counts).
func checkLineage(cm *kubeapi.ConfigMap, prev, token int64, st *EtcdState) error {
	if st == nil {
		return nil
	}
	ours := strconv.FormatUint(st.ClusterID, 16)
	if rec := cm.Data[etcdClusterKey]; rec != "" && rec != ours {
		return fmt.Errorf("api fence: %w: %s/%s data.%s is %s, this node's etcd cluster is %s (a group of the same name on another etcd, "+
			"or kha's etcd was rebuilt under a new cluster ID: docs/operations.md, \"Restoring kha's etcd\"); not starting units",
			ErrOtherGroup, Namespace, ParamName, etcdClusterKey, rec, ours)
	}
	if prev > token && prev > st.Revision {
		return fmt.Errorf("api fence: %w (%d > ours %d): %w: etcd cluster %s is at revision %d, so no term of it issued %d; "+
			"kha's etcd was restored from a snapshot without --bump-revision: stop every supervisor and restore again with "+
			"`etcdutl snapshot restore --bump-revision %d --mark-compacted` or more (docs/operations.md, \"Restoring kha's etcd\"); not starting units",
			ErrNewerToken, prev, token, ErrRestored, ours, st.Revision, prev, bumpFor(prev, st.Revision))
	}
	return nil
}

// bumpFor is a --bump-revision that puts the next terms' tokens above the
// parameter's with room to spare (etcd's own advice: a week of writes; here
// the gap plus a million).
func bumpFor(param, rev int64) int64 { return param - rev + 1_000_000 }

// record notes this etcd in the parameter being written.
func record(cm *kubeapi.ConfigMap, st *EtcdState) {
	if st != nil {
		cm.Data[etcdClusterKey] = strconv.FormatUint(st.ClusterID, 16)
	}
}
