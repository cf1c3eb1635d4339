package daemon

import (
	"testing"

	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// TestAPIFenceHealthzLine: /healthz says the mode, the token the
// apiservers hold and whether it is the elected term's.
func TestAPIFenceHealthzLine(t *testing.T) {
	for _, c := range []struct {
		st   *supervisor.APIFenceStatus
		want string
	}{
		{nil, ""},
		{&supervisor.APIFenceStatus{Mode: "gate"}, "api_fence: mode gate (the apiservers check no token)"},
		{&supervisor.APIFenceStatus{Mode: "token", Token: 101, Term: 101, Matches: true}, "api_fence: mode token; the apiservers hold token 101, the elected term's"},
		{&supervisor.APIFenceStatus{Mode: "token", Token: 100, Term: 101, Down: []string{"https://10.0.0.2:6443"}},
			"api_fence: mode token; the apiservers hold token 100, the elected term's is 101: MISMATCH (the leader's units' writes are refused until it publishes); apiservers down (gates skip them): https://10.0.0.2:6443"},
		{&supervisor.APIFenceStatus{Mode: "token", Token: 101, Term: 101, Matches: true, Unfenced: []string{"https://10.0.0.2:6443"}, Unlisted: []string{"10.0.0.13 (in the endpoints of service default/kubernetes)"}},
			"api_fence: mode token; the apiservers hold token 101, the elected term's; FENCE OFF: a stale token was admitted by https://10.0.0.2:6443 (re-apply `kha-supervisor api-fence manifests`); apiservers not in api_fence.apiservers (promotions fail): 10.0.0.13 (in the endpoints of service default/kubernetes)"},
	} {
		if got := apiFenceLine(c.st); got != c.want {
			t.Errorf("%+v:\n got %q\nwant %q", c.st, got, c.want)
		}
	}
}
