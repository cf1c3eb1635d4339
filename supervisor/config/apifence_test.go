package config

import (
	"strings"
	"testing"
)

// TestAPIFenceRefusals: each bad [api_fence] value is refused with its key.
func TestAPIFenceRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, toml, key, msg string
	}{
		{"unknown mode", `mode = "on"`, "api_fence.mode", `"off", "gate" or "token"`},
		{"relative kubeconfig", `kubeconfig = "k.conf"`, "api_fence.kubeconfig", "absolute"},
		{"http apiserver", `apiservers = ["http://10.0.0.1:6443"]`, "api_fence.apiservers", "https://host:port"},
		{"gate off loopback", `gates = ["kube-scheduler.service=10.0.0.1:16442"]`, "api_fence.gates", "not a loopback"},
		{"gate without address", `gates = ["kube-scheduler.service"]`, "api_fence.gates", "UNIT=127.0.0.1:PORT"},
		{"two gates on one port", `gates = ["kube-scheduler.service=127.0.0.1:1", "kube-controller-manager.service=127.0.0.1:1"]`, "api_fence.gates", "two gates"},
		{"gate for an unmanaged unit", "mode = \"gate\"\ngates = [\"x.service=127.0.0.1:1\"]", "api_fence.gates", "not in units.managed"},
		{"token mode without the kubeconfig file", "mode = \"token\"\napiservers = [\"https://10.0.0.1:6443\"]\nkubeconfig = \"/nonexistent/k.conf\"", "api_fence.kubeconfig", "/nonexistent/k.conf"},
		// Without the list only the kubeconfig's server would be confirmed:
		// often a load balancer, behind which an apiserver is never asked.
		{"token mode without apiservers", "mode = \"token\"\nkubeconfig = \"/nonexistent/k.conf\"", "api_fence.apiservers", "every apiserver"},
		{"webhook off loopback", "mode = \"token\"\nwebhook = \"10.0.0.1:16443\"", "api_fence.webhook", "loopback"},
		{"webhook without a port", "mode = \"token\"\nwebhook = \"127.0.0.1\"", "api_fence.webhook", "loopback host:port"},
		{"token mode without the webhook", "mode = \"token\"\nwebhook = \"\"", "api_fence.webhook", "token mode needs the webhook"},
		{"webhook on a gate's port", "mode = \"token\"\nwebhook = \"127.0.0.1:16442\"", "api_fence.webhook", "gate of kube-scheduler.service"},
		{"zero confirm timeout", `confirm_timeout = "0s"`, "api_fence.confirm_timeout", "positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "config.toml", "node = \"m1\"\n[api_fence]\n"+tc.toml+"\n", 0o600)
			_, err := Load(path)
			e := asError(t, err)
			if e.Key != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v (key %q), want key %q and %q", err, e.Key, tc.key, tc.msg)
			}
		})
	}
}

func TestAPIFenceDefaultIsOffAndGatesParse(t *testing.T) {
	a := Default().APIFence
	if a.Mode != APIFenceOff || a.Enabled() {
		t.Errorf("default mode %q", a.Mode)
	}
	g, ok := a.GateFor("kube-scheduler.service")
	if !ok || g.Addr != "127.0.0.1:16442" {
		t.Errorf("GateFor(kube-scheduler.service) = %+v, %v", g, ok)
	}
	if _, ok := a.GateFor("other.service"); ok {
		t.Error("an unlisted unit has a gate")
	}
}
