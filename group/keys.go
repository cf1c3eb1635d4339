package group

import (
	"fmt"
	"path"
	"strings"
)

// Keys is the etcd key layout of one cluster:
//
//	PREFIX/CLUSTER/leader          election key: value = node name, on the election lease;
//	                               its CreateRevision is the fencing token
//	PREFIX/CLUSTER/members/NODE    member record (JSON) on the member's own lease
//	PREFIX/CLUSTER/control/...     operator requests (control.go)
//	PREFIX/CLUSTER/history/...     transitions and operator actions (history.go)
//	PREFIX/CLUSTER/writers/NODE    etcd_fence: NODE may have started units and not yet
//	                               shown them down (value: its token; no lease)
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

// Control keys.
func (k Keys) Control() string        { return k.Root + "/control/" }
func (k Keys) Freeze() string         { return k.Control() + "freeze" }
func (k Keys) Ban(node string) string { return k.Control() + "ban/" + node }
func (k Keys) Handoff() string        { return k.Control() + "handoff" }
func (k Keys) Drill() string          { return k.Control() + "drill" }

// Writers is the prefix of the etcd fence's writer marks: a node whose mark
// exists may still have components of a term, or their requests in its
// kube-apiserver (supervisor/etcdfence.go).
func (k Keys) Writers() string { return k.Root + "/writers/" }

// Writer is node's writer mark.
func (k Keys) Writer(node string) string { return k.Writers() + node }

// History is the prefix of the transition history.
func (k Keys) History() string { return k.Root + "/history/" }

// historyKey sorts by time first (zero-padded nanoseconds), then node; an
// operator's action is filed apart from the transitions of the node it
// concerns ("~" is no node name's character).
func (k Keys) historyKey(e Event) string {
	if e.Operator() {
		return fmt.Sprintf("%s%020d-~%s~%s", k.History(), e.At.UnixNano(), e.Kind, e.Node)
	}
	return fmt.Sprintf("%s%020d-%s", k.History(), e.At.UnixNano(), e.Node)
}
