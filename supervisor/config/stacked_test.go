package config

import (
	"strings"
	"testing"
)

// A member on this node without [etcd_fence] is a warning naming the
// endpoint and the fix; none without a local member, none with the fence.
func TestStackedEtcdWithoutTheFenceAtEtcdIsAWarning(t *testing.T) {
	local := func(h string) bool { return h == "10.0.0.1" || h == "localhost" }
	c := Config{Etcd: Etcd{Endpoints: []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://localhost:2379", "::bad"}}}
	w := c.StackedWarnings(local)
	if len(w) != 1 || !strings.Contains(w[0], "https://10.0.0.1:2379, https://localhost:2379") || !strings.Contains(w[0], "etcd_fence.users") {
		t.Fatalf("stacked, no fence: %q", w)
	}
	c.Etcd.Endpoints = []string{"https://10.0.0.2:2379"}
	if w := c.StackedWarnings(local); w != nil {
		t.Errorf("no local member: %q", w)
	}
	c.Etcd.Endpoints = []string{"https://10.0.0.1:2379"}
	c.EtcdFence.Users = []string{"m1=kube-apiserver-m1"}
	if w := c.StackedWarnings(local); w != nil {
		t.Errorf("stacked with the fence at etcd: %q", w)
	}
}
