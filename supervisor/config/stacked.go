package config

import (
	"fmt"
	"net/url"
	"strings"
)

// StackedWarnings are what check-config and the daemon say about an etcd
// member on this node (kubeadm's stacked etcd), found by isLocal (true for
// a host name or address of this machine). Such a member carries its
// apiserver's writes when a partition takes the node away: as a follower
// it forwards them to the raft leader it still believes in, and the
// forwarded proposals wait in its peer connections until the partition
// heals, to commit then, after the next term's first write, whatever the
// fence did to the components that sent them (lab scenario 73: a late
// commit in every trial in modes off, gate and token). Only [etcd_fence]
// orders them: etcd refuses a proposal of the revoked apiserver at apply.
func (c Config) StackedWarnings(isLocal func(host string) bool) []string {
	if c.EtcdFence.Enabled() {
		return nil
	}
	var local []string
	for _, ep := range c.Etcd.Endpoints {
		u, err := url.Parse(ep)
		if err == nil && u.Hostname() != "" && isLocal(u.Hostname()) {
			local = append(local, ep)
		}
	}
	if len(local) == 0 {
		return nil
	}
	return []string{fmt.Sprintf("etcd.endpoints %s: an etcd member on this node (stacked etcd) and [etcd_fence] off: "+
		"when a partition takes this node away, what its kube-apiserver had sent to that member can commit in etcd after the next "+
		"leader's first write (the member forwards it to the raft leader at the heal; the fence cannot recall it); "+
		"set etcd_fence.users (docs/architecture.md, \"The old term's writes in etcd\")", strings.Join(local, ", "))}
}
