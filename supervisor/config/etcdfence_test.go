package config

import (
	"strings"
	"testing"
)

// TestEtcdFenceRefusals: each bad [etcd_fence] value is refused with its key.
func TestEtcdFenceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, top, toml, key, msg string
	}{
		{"entry without user", "", `users = ["m1"]`, "etcd_fence.users", "NODE=USER"},
		{"bad node name", "", `users = ["M_1=u1"]`, "etcd_fence.users", "DNS-1123"},
		{"node twice", "", `users = ["m1=u1", "m1=u2"]`, "etcd_fence.users", "listed twice"},
		{"one user for two apiservers", "", `users = ["m1=u1", "m2=u1"]`, "etcd_fence.users", "user of its own"},
		{"no role", "", "role = \"\"\nusers = [\"m1=u1\"]", "etcd_fence.role", "etcd role"},
		{"own node missing", "", `users = ["m2=u2"]`, "etcd_fence.users", "no entry for this node (m1)"},
		{"peer missing", `peers = ["m1", "m3"]`, `users = ["m1=u1", "m2=u2"]`, "etcd_fence.users", "no entry for peer m3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "config.toml", "node = \"m1\"\n"+tc.top+"\n[etcd_fence]\n"+tc.toml+"\n", 0o600)
			_, err := Load(path)
			e := asError(t, err)
			if e.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v (key %q), want key %q and %q", err, e.Key, tc.key, tc.msg)
			}
		})
	}
}

func TestEtcdFenceOffByDefaultAndUsersParse(t *testing.T) {
	if f := Default().EtcdFence; f.Enabled() {
		t.Fatalf("default etcd_fence is on: %+v", f)
	}
	dir := t.TempDir()
	path := writeFile(t, dir, "config.toml", "node = \"m1\"\npeers = [\"m1\", \"m2\"]\n[etcd_fence]\nusers = [\"m1=kube-apiserver-m1\", \" m2 = kube-apiserver-m2 \"]\n", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	users, err := c.EtcdFence.UserMap()
	if err != nil || !c.EtcdFence.Enabled() || c.EtcdFence.Role != "kube-apiserver" || users["m1"] != "kube-apiserver-m1" || users["m2"] != "kube-apiserver-m2" {
		t.Fatalf("got %+v, %v, %v", c.EtcdFence, users, err)
	}
}
