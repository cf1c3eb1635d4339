package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

func init() { register(apiFenceCommand) }

func apiFenceCommand(e env) *cobra.Command {
	c := &cobra.Command{
		Use:     "api-fence",
		GroupID: groupNode,
		Short:   "the fence at the API server: api-fence manifests|status",
		Long: `The fence at the API server (api_fence.mode): the admission policy that refuses the managed components' writes without the current fencing token, and the token the API servers hold.
See docs/operations.md, "Fencing at the API server".`,
		RunE: func(c *cobra.Command, args []string) error {
			_ = c.Help()
			return exit(exitConfig)
		},
	}
	c.AddCommand(apiFenceManifestsCommand(e), apiFenceStatusCommand(e))
	return c
}

func apiFenceManifestsCommand(e env) *cobra.Command {
	var users []string
	var token int64
	var rbacOnly bool
	var wh webhookFlags
	c := &cobra.Command{
		Use:   "manifests",
		Short: "print the ValidatingAdmissionPolicy, its binding, the parameter, the guard and the RBAC to kubectl apply",
		Long: `Print, as one YAML stream for kubectl apply: the ValidatingAdmissionPolicy that denies CREATE, UPDATE and DELETE on every resource and subresource by system:kube-scheduler, system:kube-controller-manager and the controller-manager's service accounts unless their user extra kha.io/fencing-token equals the parameter's token; its binding (a missing parameter denies); the parameter ConfigMap kube-system/kha-fencing-token; a policy that lets only the supervisors change it; and the supervisors' RBAC (impersonation of those users and of the token extra, TokenReview, the parameter).
With --webhook (clusters older than 1.30): the RBAC, the parameter and a ValidatingWebhookConfiguration with the same rule, failurePolicy Fail, calling each apiserver's own node's supervisor at --webhook-url, trusting every --ca-bundle.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// Without a token the parameter refuses every managed write
			// once applied: the leader's units would stop working.
			if !rbacOnly && !c.Flags().Changed("token") {
				return exit(fail(e, exitConfig, "api-fence manifests: --token is required: the parameter it prints holds the token the admission policy admits, "+
					"and without one every managed write is refused once it is applied. Give the leader's token (the TOKEN column of kha-supervisor status), "+
					"or --token 0 when no member leads and none should write until a leader publishes its own"))
			}
			if wh.on {
				return exit(apiFenceWebhookManifests(e, users, token, wh))
			}
			return exit(apiFenceManifests(e, users, token, rbacOnly))
		},
	}
	fs := c.Flags()
	fs.BoolVar(&wh.on, "webhook", false, "for clusters older than 1.30: print the ValidatingWebhookConfiguration (the same rule, served by every supervisor at api_fence.webhook) instead of the policies")
	fs.StringVar(&wh.url, "webhook-url", apifence.DefaultWebhookURL, "`URL` each apiserver calls (its own node's supervisor: loopback, api_fence.webhook's port)")
	fs.StringArrayVar(&wh.caFiles, "ca-bundle", nil, "`file` with a node's gate CA (state_dir/gate-ca.crt), repeatable: every node's; default this node's "+localca.CertFile(localca.DefaultStateDir))
	fs.StringArrayVar(&users, "supervisor-user", nil, "`user` of the supervisors' own credential (repeatable; default "+apifence.DefaultSupervisorUser+")")
	fs.Int64Var(&token, "token", 0, "the parameter's initial token, required (but with --rbac-only): the current leader's (kha-supervisor status), so that its units keep writing; 0 for none (no managed write until a leader publishes)")
	fs.BoolVar(&rbacOnly, "rbac-only", false, "print only the supervisors' RBAC (what api_fence.mode = gate needs)")
	return c
}

// apiFenceManifests prints the objects to kubectl apply.
func apiFenceManifests(e env, users []string, token int64, rbacOnly bool) int {
	for _, u := range users {
		if strings.TrimSpace(u) == "" {
			return fail(e, exitConfig, "api-fence manifests: --supervisor-user must not be empty")
		}
	}
	if token < 0 {
		return fail(e, exitConfig, "api-fence manifests: --token must not be negative")
	}
	m := apifence.Build(apifence.ManifestOptions{SupervisorUsers: users, Token: token})
	objects := m.Objects()
	if rbacOnly {
		objects = m.RBAC()
	}
	y, err := apifence.Render(objects)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	_, _ = e.stdout.Write(y)
	return exitOK
}

// webhookFlags are api-fence manifests --webhook's.
type webhookFlags struct {
	on      bool
	url     string
	caFiles []string
}

// apiFenceWebhookManifests prints the webhook variant: RBAC, parameter,
// ValidatingWebhookConfiguration with every node's gate CA as caBundle.
func apiFenceWebhookManifests(e env, users []string, token int64, wh webhookFlags) int {
	u, err := url.Parse(wh.url)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fail(e, exitConfig, "api-fence manifests: --webhook-url %q must be https://host:port/path", wh.url)
	}
	for _, s := range users {
		if strings.TrimSpace(s) == "" {
			return fail(e, exitConfig, "api-fence manifests: --supervisor-user must not be empty")
		}
	}
	if token < 0 {
		return fail(e, exitConfig, "api-fence manifests: --token must not be negative")
	}
	files := wh.caFiles
	if len(files) == 0 {
		files = []string{localca.CertFile(localca.DefaultStateDir)}
	}
	var bundle []byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fail(e, exitConfig, "api-fence manifests: --ca-bundle: %v (each node's supervisor creates its CA when the fence starts; copy every node's)", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return fail(e, exitConfig, "api-fence manifests: --ca-bundle %s holds no PEM certificate", f)
		}
		bundle = append(bundle, b...)
	}
	objs := apifence.BuildWebhook(apifence.WebhookOptions{ManifestOptions: apifence.ManifestOptions{SupervisorUsers: users, Token: token},
		URL: wh.url, CABundle: bundle})
	y, err := apifence.Render(objs)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	_, _ = e.stdout.Write(y)
	return exitOK
}

func apiFenceStatusCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "print the mode and the fencing token each API server's parameter holds",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(apiFenceStatus(e, nodeConfigPath(e, c)))
		},
	}
}

// apiFenceStatus prints the token each apiserver's parameter holds.
func apiFenceStatus(e env, configFile string) int {
	cfg, err := config.Load(configFile)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	fmt.Fprintf(e.stdout, "api_fence.mode = %s\n", cfg.APIFence.Mode)
	if !cfg.APIFence.Enabled() {
		return exitOK
	}
	ups, err := upstreams(cfg.APIFence)
	if err != nil {
		return fail(e, exitConfig, "%v", err)
	}
	code := exitOK
	for _, u := range ups {
		tok, err := (&apifence.Publisher{Endpoints: []*rest.Config{u}}).Read(e.ctx)
		if err != nil {
			fmt.Fprintf(e.stdout, "%s: cannot read %s/%s: %v\n", u.Host, apifence.Namespace, apifence.ParamName, err)
			code = exitFailure
			continue
		}
		fmt.Fprintf(e.stdout, "%s: token %d\n", u.Host, tok)
	}
	return code
}

// apiFence adapts apifence.Fence to the supervisor's APIFence and status.
type apiFence struct {
	*apifence.Fence
	upstreamHost string // the kubeconfig's server, when api_fence.apiservers is empty
}

func (f apiFence) APIFenceStatus() supervisor.APIFenceStatus {
	st := f.Status()
	out := supervisor.APIFenceStatus{Mode: st.Mode, Token: st.Token, Gates: st.Gates, Down: st.Down, Unfenced: st.Unfenced, Unlisted: st.Unlisted}
	if h := st.Handover; h != nil {
		out.Published, out.PublishedAt, out.TookMS = h.Token, h.At, h.Took.Milliseconds()
	}
	if st.Webhook != nil {
		out.Webhook = st.Webhook.Addr
	}
	return out
}

// upstreams is the supervisor's credential, one config per apiserver.
func upstreams(a config.APIFence) ([]*rest.Config, error) {
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
	ups, err := upstreams(a)
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
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
	return line + apiFenceAlarms(st.Unfenced, st.Unlisted)
}

// apiFenceAlarms is what /healthz and status add when the fence is off
// somewhere or the apiserver list is incomplete.
func apiFenceAlarms(unfenced, unlisted []string) string {
	var s string
	if len(unfenced) > 0 {
		s += "; FENCE OFF: a stale token was admitted by " + strings.Join(unfenced, ", ") + " (re-apply `kha-supervisor api-fence manifests`)"
	}
	if len(unlisted) > 0 {
		s += "; apiservers not in api_fence.apiservers (promotions fail): " + strings.Join(unlisted, ", ")
	}
	return s
}

// apiFenceClusterLine is the cluster status's line about the fence at the
// API server, from the member records (the leader's first); "" when no
// member runs it.
func apiFenceClusterLine(cs group.ClusterStatus) string {
	var lead *group.APIFence
	var held int64
	modes := map[string][]string{}
	for _, m := range cs.Members {
		mode := config.APIFenceOff
		if a := m.APIFence; a != nil {
			mode = a.Mode
			held = max(held, a.Token)
			if m.Node == cs.Leader {
				lead = a
			}
		}
		modes[mode] = append(modes[mode], m.Node)
	}
	if len(modes[config.APIFenceOff]) == len(cs.Members) {
		return ""
	}
	var b strings.Builder
	b.WriteString("api fence:")
	if lead != nil {
		fmt.Fprintf(&b, " leader's mode %s;", lead.Mode)
		held = max(held, lead.Token)
	}
	switch {
	case held == 0:
		b.WriteString(" no token known to be held by the apiservers")
	case held == cs.Token:
		fmt.Fprintf(&b, " the apiservers hold token %d, the leader's", held)
	default:
		fmt.Fprintf(&b, " the apiservers hold token %d, the leader's is %s: MISMATCH", held, tokenText(cs.Token))
	}
	if lead != nil && lead.Published == cs.Token && !lead.PublishedAt.IsZero() {
		fmt.Fprintf(&b, " (handed over at %s in %d ms)", stamp(lead.PublishedAt), lead.TookMS)
	}
	if lead != nil {
		b.WriteString(apiFenceAlarms(lead.Unfenced, lead.Unlisted))
	}
	if len(modes) > 1 {
		var parts []string
		for _, mode := range apiFenceModes {
			if n := modes[mode]; len(n) > 0 {
				parts = append(parts, mode+": "+strings.Join(n, ","))
			}
		}
		b.WriteString("; members differ in api_fence.mode (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}
