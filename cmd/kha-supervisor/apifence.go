package main

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(apiFenceCommand) }

func apiFenceCommand(e env) *cobra.Command {
	c := &cobra.Command{
		Use:     "api-fence",
		GroupID: groupNode,
		Short:   "the fence at the API server: api-fence manifests|status|ca",
		Long: `The fence at the API server (api_fence.mode): the admission policy that refuses the managed components' writes without the current fencing token, and the token the API servers hold.
See docs/operations.md, "Fencing at the API server".`,
		RunE: func(c *cobra.Command, args []string) error {
			_ = c.Help()
			return exit(exitConfig)
		},
	}
	c.AddCommand(apiFenceManifestsCommand(e), apiFenceStatusCommand(e), apiFenceCACommand(e))
	return c
}

func apiFenceManifestsCommand(e env) *cobra.Command {
	var users []string
	var token int64
	var rbacOnly bool
	var wh webhookFlags
	c := &cobra.Command{
		Use:   "manifests",
		Short: "print the ValidatingAdmissionPolicy, its binding, the token webhook's registration, the parameter, the guard and the RBAC to kubectl apply",
		Long: `Print, as one YAML stream for kubectl apply: the ValidatingAdmissionPolicy that denies CREATE, UPDATE and DELETE on every resource and subresource by system:kube-scheduler, system:kube-controller-manager and the controller-manager's service accounts unless their user extra kha.io/fencing-token equals the parameter's token; its binding (a missing parameter denies); the parameter ConfigMap kube-system/kha-fencing-token; a policy that lets only the supervisors change it; the supervisors' RBAC (impersonation of those users and of the token extra, TokenReview, the parameter); and the ValidatingWebhookConfiguration of the token webhook, the authority where an apiserver's cache of the parameter is behind (a paused or healed apiserver): every apiserver calls its own node's supervisor at --webhook-url for every managed write, failurePolicy Fail, trusting every --ca-bundle (each node's gate CA: ` + "`kha-supervisor api-fence ca`" + ` on each node prints it). Every supervisor must serve the webhook (api_fence.mode gate or token) before this is applied.
With --webhook (clusters older than 1.30): the RBAC, the parameter and the webhook's registration, without the policies.`,
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
				return exit(apiFenceWebhookManifests(e, users, token, wh, apifence.BuildWebhook))
			}
			if rbacOnly {
				return exit(apiFenceManifests(e, users, token, rbacOnly))
			}
			return exit(apiFenceWebhookManifests(e, users, token, wh, apifence.BuildToken))
		},
	}
	fs := c.Flags()
	fs.BoolVar(&wh.on, "webhook", false, "for clusters older than 1.30: print the webhook's registration without the policies")
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

// apiFenceWebhookManifests prints what build gives (token mode's policy set
// and webhook, or the webhook variant: RBAC, parameter,
// ValidatingWebhookConfiguration) with every node's gate CA as the
// webhook's caBundle.
func apiFenceWebhookManifests(e env, users []string, token int64, wh webhookFlags, build func(apifence.WebhookOptions) []any) int {
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
	objs := build(apifence.WebhookOptions{ManifestOptions: apifence.ManifestOptions{SupervisorUsers: users, Token: token},
		URL: wh.url, CABundle: bundle})
	y, err := apifence.Render(objs)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	_, _ = e.stdout.Write(y)
	return exitOK
}

func apiFenceCACommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "ca",
		Short: "print this node's gate CA (creating it if missing), for api-fence manifests --ca-bundle",
		Long: `Print this node's gate CA certificate (PEM), the CA that signs its gates' and its token webhook's serving certificates; create it in api_fence.state_dir first if the fence has not run yet.
Collect every node's into files and pass each to ` + "`api-fence manifests --ca-bundle`" + `: every apiserver calls its own node's webhook, so the webhook's registration must trust every node's CA.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return exit(apiFenceCA(e, nodeConfigPath(e, c)))
		},
	}
}

func apiFenceCA(e env, configFile string) int {
	cfg, err := config.Load(configFile)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	ca, err := localca.Open(cfg.APIFence.StateDir)
	if err != nil {
		return fail(e, exitFailure, "api-fence ca: %v", err)
	}
	_, _ = e.stdout.Write(ca.PEM())
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
	ups, err := daemon.Upstreams(cfg.APIFence)
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

func orNone(s string) string {
	if s == "" {
		return "(none)"
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
		b.WriteString(apifence.AlarmText(lead.Unfenced, lead.Unlisted, lead.WebhookOff))
	}
	if len(modes) > 1 {
		var parts []string
		for _, mode := range config.APIFenceModes {
			if n := modes[mode]; len(n) > 0 {
				parts = append(parts, mode+": "+strings.Join(n, ","))
			}
		}
		b.WriteString("; members differ in api_fence.mode (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}
