package config

import (
	"fmt"
	"slices"
	"strings"
)

// EtcdFence is the [etcd_fence] section: the fence at etcd itself
// (docs/architecture.md, "The fence at etcd"). When this node takes the
// election key over from a holder that did not say its units are stopped,
// it revokes Role from that holder's kube-apiserver's etcd user before any
// unit starts, so that nothing the old master's apiserver still sends (a
// master paused with its apiserver and resumed, a request queued across a
// partition, a stacked member forwarding proposals) can commit in etcd;
// each node grants Role back to its own apiserver's user once its units
// are confirmed stopped. Off while Users is empty. Needs etcd's auth
// enabled and this supervisor's etcd identity in etcd's root role.
type EtcdFence struct {
	// Role is the etcd role that lets a kube-apiserver read and write its
	// keys (etcdctl role grant-permission kube-apiserver readwrite --prefix /registry/).
	Role string `toml:"role"`
	// Users are "NODE=USER": the etcd user each master's kube-apiserver
	// authenticates as (its --etcd-certfile's CN, or a user and password),
	// one per master, this node included.
	Users []string `toml:"users"`
}

// Enabled reports whether the fence at etcd is on.
func (f EtcdFence) Enabled() bool { return len(f.Users) > 0 }

// UserMap parses etcd_fence.users (Validate has checked it): node to user.
func (f EtcdFence) UserMap() (map[string]string, error) {
	out := make(map[string]string, len(f.Users))
	users := map[string]bool{}
	for i, e := range f.Users {
		node, user, ok := strings.Cut(e, "=")
		node, user = strings.TrimSpace(node), strings.TrimSpace(user)
		switch {
		case !ok || node == "" || user == "":
			return nil, fmt.Errorf("entry %d: must be NODE=USER, e.g. \"m1=kube-apiserver-m1\"", i+1)
		case nameProblem(node) != "":
			return nil, fmt.Errorf("entry %d: node %q: %s", i+1, node, nameProblem(node))
		case out[node] != "":
			return nil, fmt.Errorf("entry %d: node %s is listed twice", i+1, node)
		case users[user]:
			// One identity for two apiservers cannot be fenced apart.
			return nil, fmt.Errorf("entry %d: user %s is given to two nodes; each kube-apiserver needs an etcd user of its own", i+1, user)
		}
		out[node], users[user] = user, true
	}
	return out, nil
}

func checkEtcdFence(c Config) *Error {
	f := c.EtcdFence
	users, err := f.UserMap()
	if err != nil {
		return refuse(c, "etcd_fence.users", "%v", err)
	}
	if !f.Enabled() {
		return nil
	}
	if strings.TrimSpace(f.Role) == "" {
		return refuse(c, "etcd_fence.role", "must name the etcd role that grants the kube-apiservers their keys, e.g. \"kube-apiserver\"")
	}
	if users[c.Node] == "" {
		return refuse(c, "etcd_fence.users", "has no entry for this node (%s): its own kube-apiserver could never be granted the role back", c.Node)
	}
	for _, p := range c.Peers {
		if users[p] == "" {
			return refuse(c, "etcd_fence.users", "has no entry for peer %s: its kube-apiserver could not be fenced at etcd", p)
		}
	}
	if slices.Contains(f.Users, "") {
		return refuse(c, "etcd_fence.users", "has an empty entry")
	}
	return nil
}
