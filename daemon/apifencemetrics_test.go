package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// TestAPIFenceMetrics: the mode, the token the apiservers hold, the term's,
// whether they match, the last handover and the apiservers down are
// exported; with the fence off only the mode.
func TestAPIFenceMetrics(t *testing.T) {
	off := prometheus.NewRegistry()
	off.MustRegister(newAPIFenceCollector("off", nil, func() supervisor.Status { return supervisor.Status{} }, nil))
	if err := testutil.GatherAndCompare(off, strings.NewReader(`
# HELP kha_api_fence_mode 1 for the configured api_fence.mode, 0 for the others.
# TYPE kha_api_fence_mode gauge
kha_api_fence_mode{mode="gate"} 0
kha_api_fence_mode{mode="off"} 1
kha_api_fence_mode{mode="token"} 0
`)); err != nil {
		t.Error(err)
	}

	f, err := apifence.New(apifence.Options{Mode: apifence.ModeToken, StateDir: t.TempDir(),
		Upstreams: []*rest.Config{{Host: "https://10.0.0.1:6443"}, {Host: "https://10.0.0.2:6443"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := time.Unix(1700000000, 0)
	st := supervisor.Status{APIFence: &supervisor.APIFenceStatus{Mode: "token", Token: 100, Term: 101, Matches: false,
		PublishedAt: at, TookMS: 250, Down: []string{"https://10.0.0.2:6443"},
		Unfenced: []string{"https://10.0.0.1:6443"}, Unlisted: []string{"10.0.0.3 (in the endpoints of service default/kubernetes)"}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newAPIFenceCollector("token", &apiFence{Fence: f}, func() supervisor.Status { return st },
		[]string{"https://10.0.0.1:6443", "https://10.0.0.2:6443"}))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kha_api_fence_apiserver_down 1 while a gate skips this apiserver after a failed connection.
# TYPE kha_api_fence_apiserver_down gauge
kha_api_fence_apiserver_down{apiserver="https://10.0.0.1:6443"} 0
kha_api_fence_apiserver_down{apiserver="https://10.0.0.2:6443"} 1
# HELP kha_api_fence_unfenced 1 when the leader's last self-check found this apiserver admitting a write with a stale fencing token (the policy unbound, in Audit, or changed): the fence is off there.
# TYPE kha_api_fence_unfenced gauge
kha_api_fence_unfenced{apiserver="https://10.0.0.1:6443"} 1
kha_api_fence_unfenced{apiserver="https://10.0.0.2:6443"} 0
# HELP kha_api_fence_unlisted_apiservers How many apiservers the cluster knows that api_fence.apiservers does not list (token mode promotions fail while any).
# TYPE kha_api_fence_unlisted_apiservers gauge
kha_api_fence_unlisted_apiservers 1
# HELP kha_api_fence_handover_seconds How long this node's last token handover took (write and confirmation on every apiserver).
# TYPE kha_api_fence_handover_seconds gauge
kha_api_fence_handover_seconds 0.25
# HELP kha_api_fence_term_token The elected term's fencing token as this node sees it (the leader's); 0 none.
# TYPE kha_api_fence_term_token gauge
kha_api_fence_term_token 101
# HELP kha_api_fence_token The fencing token the apiservers' parameter holds, as this node last wrote or read it (token mode); 0 unknown.
# TYPE kha_api_fence_token gauge
kha_api_fence_token 100
# HELP kha_api_fence_token_matches 1 when the apiservers hold the elected term's token (token mode), else 0: the leader's units' writes are refused.
# TYPE kha_api_fence_token_matches gauge
kha_api_fence_token_matches 0
`), "kha_api_fence_token", "kha_api_fence_term_token", "kha_api_fence_token_matches", "kha_api_fence_handover_seconds", "kha_api_fence_apiserver_down",
		"kha_api_fence_unfenced", "kha_api_fence_unlisted_apiservers"); err != nil {
		t.Error(err)
	}
}
