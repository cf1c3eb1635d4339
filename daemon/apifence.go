package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// apiFence adapts apifence.Fence to the supervisor's APIFence and status.
type apiFence struct {
	*apifence.Fence
	upstreamHost string // the kubeconfig's server, when api_fence.apiservers is empty
}

func (f apiFence) APIFenceStatus() supervisor.APIFenceStatus {
	st := f.Status()
	out := supervisor.APIFenceStatus{Mode: st.Mode, Token: st.Token, Gates: st.Gates, Down: st.Down, Unfenced: st.Unfenced, Unlisted: st.Unlisted, WebhookOff: st.WebhookOff}
	if h := st.Handover; h != nil {
		out.Published, out.PublishedAt, out.TookMS = h.Token, h.At, h.Took.Milliseconds()
	}
	if st.Webhook != nil {
		out.Webhook = st.Webhook.Addr
	}
	return out
}

// Upstreams is the supervisor's credential, one config per apiserver.
func Upstreams(a config.APIFence) ([]*rest.Config, error) {
	base, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("api_fence.kubeconfig %s: %w", a.Kubeconfig, err)
	}
	if base.Impersonate.UserName != "" {
		return nil, fmt.Errorf("api_fence.kubeconfig %s: must not impersonate (it names %q)", a.Kubeconfig, base.Impersonate.UserName)
	}
	if len(a.APIServers) == 0 {
		return []*rest.Config{base}, nil
	}
	var ups []*rest.Config
	for _, h := range a.APIServers {
		c := rest.CopyConfig(base)
		c.Host = h
		ups = append(ups, c)
	}
	return ups, nil
}

// newAPIFence builds the fence the configuration asks for; nil when off.
func newAPIFence(cfg config.Config, etcd apifence.EtcdFunc, log *slog.Logger) (*apiFence, error) {
	a := cfg.APIFence
	if !a.Enabled() {
		return nil, nil
	}
	ups, err := Upstreams(a)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(a.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("api_fence.client_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("api_fence.client_ca %s: no PEM certificate", a.ClientCA)
	}
	list, err := a.GateList()
	if err != nil {
		return nil, fmt.Errorf("api_fence.gates: %w", err)
	}
	var specs []apifence.GateSpec
	for _, g := range list {
		specs = append(specs, apifence.GateSpec{Unit: g.Unit, Addr: g.Addr})
	}
	f, err := apifence.New(apifence.Options{Mode: a.Mode, Upstreams: ups, Gates: specs, StateDir: a.StateDir,
		ClientCAs: pool, ConfirmTimeout: a.ConfirmTimeout, Group: cfg.Cluster, Etcd: etcd, Webhook: a.Webhook, Log: log,
		// Only the unit's own processes may use its gate (issue 23 item 4).
		Peers: gate.ProcPeers{}})
	if err != nil {
		return nil, err
	}
	return &apiFence{Fence: f, upstreamHost: ups[0].Host}, nil
}

// etcdState names kha's etcd cluster and its current revision for the
// parameter's record (apifence/lineage.go): the header of a linearizable
// count-only Get of the election key, through the renewals' hedged pool
// (the clients the leader has just proven) and within the key prefix (a
// least-privilege etcd user may read nothing else), bounded by
// etcd.request_timeout.
func etcdState(kv etcdconn.KV, key string, timeout time.Duration) apifence.EtcdFunc {
	return func(ctx context.Context) (apifence.EtcdState, error) {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		resp, err := kv.Get(ctx, key, clientv3.WithCountOnly())
		if err != nil {
			return apifence.EtcdState{}, err
		}
		return apifence.EtcdState{ClusterID: resp.Header.ClusterId, Revision: resp.Header.Revision}, nil
	}
}

// iface is the supervisor's APIFence: a nil *apiFence must become a nil
// interface, or the supervisor would call through it.
func (f *apiFence) iface() supervisor.APIFence {
	if f == nil {
		return nil
	}
	return f
}

// start registers the fence's metrics, points the gates at the
// supervisor's term and serves them.
func (f *apiFence) start(sup *supervisor.Supervisor, reg prometheus.Registerer, a config.APIFence) {
	hosts := a.APIServers
	if f != nil && len(hosts) == 0 {
		hosts = []string{f.upstreamHost}
	}
	reg.MustRegister(newAPIFenceCollector(a.Mode, f, sup.Status, hosts))
	if f == nil {
		return
	}
	f.SetTerm(sup.Term)
	f.OnStranger(func(unit string, p gate.Peer) { sup.ReportGateStranger(unit, p.PID, p.Cmdline, p.Cgroup) })
	f.Serve()
}

func (f *apiFence) close() {
	if f != nil {
		f.Close()
	}
}

// APIFenceLine is /healthz's line about the fence at the API server.
func (s statusSource) APIFenceLine() string { return apiFenceLine(s.sup.Status().APIFence) }

func apiFenceLine(st *supervisor.APIFenceStatus) string {
	if st == nil {
		return ""
	}
	line := "api_fence: mode " + st.Mode
	switch {
	case st.Mode != apifence.ModeToken:
		line += " (the apiservers check no token)"
	case st.Token == 0:
		line += "; the token the apiservers hold is not known yet"
	case st.Matches:
		line += fmt.Sprintf("; the apiservers hold token %d, the elected term's", st.Token)
	default:
		line += fmt.Sprintf("; the apiservers hold token %d, the elected term's is %s: MISMATCH (the leader's units' writes are refused until it publishes)",
			st.Token, tokenText(st.Term))
	}
	if len(st.Down) > 0 {
		line += "; apiservers down (gates skip them): " + strings.Join(st.Down, ", ")
	}
	return line + apifence.AlarmText(st.Unfenced, st.Unlisted, st.WebhookOff)
}

func tokenText(t int64) string {
	if t == 0 {
		return "-"
	}
	return fmt.Sprint(t)
}
