package main

import (
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Registered here rather than in main.go: the CLI moves to cobra on the ops
// branch; there this becomes one AddCommand line.
func init() {
	register("api-fence", "the fence at the API server: api-fence manifests | status", apiFenceCmd)
}

const apiFenceUsage = "usage: kha-supervisor api-fence manifests [--supervisor-user USER]... [--token N] [--rbac-only]\n" +
	"       kha-supervisor api-fence status [-c CONFIG]"

func apiFenceCmd(e env, args []string) int {
	switch {
	case len(args) > 0 && args[0] == "manifests":
		return apiFenceManifests(e, args[1:])
	case len(args) > 0 && args[0] == "status":
		return apiFenceStatus(e, args[1:])
	}
	fmt.Fprintln(e.stderr, apiFenceUsage)
	return exitConfig
}

// apiFenceManifests prints the objects to kubectl apply.
func apiFenceManifests(e env, args []string) int {
	fs := flag.NewFlagSet("api-fence manifests", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var users multiFlag
	fs.Var(&users, "supervisor-user", "user of the supervisors' own credential (repeatable; default "+apifence.DefaultSupervisorUser+")")
	rbacOnly := fs.Bool("rbac-only", false, "print only the supervisors' RBAC (what gate mode needs)")
	token := fs.Int64("token", 0, "the parameter's initial token: the current leader's (kha-supervisor status), so its units keep writing")
	if err := fs.Parse(args); err != nil {
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "kha-supervisor api-fence manifests: unexpected argument %q\n", fs.Arg(0))
		return exitConfig
	}
	for _, u := range users {
		if strings.TrimSpace(u) == "" {
			fmt.Fprintln(e.stderr, "kha-supervisor api-fence manifests: --supervisor-user must not be empty")
			return exitConfig
		}
	}
	if *token < 0 {
		fmt.Fprintln(e.stderr, "kha-supervisor api-fence manifests: --token must not be negative")
		return exitConfig
	}
	m := apifence.Build(apifence.ManifestOptions{SupervisorUsers: users, Token: *token})
	objects := m.Objects()
	if *rbacOnly {
		objects = m.RBAC()
	}
	y, err := apifence.Render(objects)
	if err != nil {
		fmt.Fprintln(e.stderr, "kha-supervisor:", err)
		return exitFailure
	}
	_, _ = e.stdout.Write(y)
	return exitOK
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// apiFence adapts apifence.Fence to the supervisor's APIFence and status.
type apiFence struct{ *apifence.Fence }

func (f apiFence) APIFenceStatus() supervisor.APIFenceStatus {
	st := f.Status()
	return supervisor.APIFenceStatus{Mode: st.Mode, Token: st.Token, Gates: st.Gates}
}

// apiFenceStatus prints the token each apiserver's parameter holds.
func apiFenceStatus(e env, args []string) int {
	cfg, code := loadConfig(e, flag.NewFlagSet("api-fence status", flag.ContinueOnError), args)
	if code != exitOK {
		return code
	}
	fmt.Fprintf(e.stdout, "api_fence.mode = %s\n", cfg.APIFence.Mode)
	if !cfg.APIFence.Enabled() {
		return exitOK
	}
	ups, err := upstreams(cfg.APIFence)
	if err != nil {
		fmt.Fprintln(e.stderr, "kha-supervisor:", err)
		return exitConfig
	}
	code = exitOK
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
func newAPIFence(cfg config.Config, log *slog.Logger) (*apiFence, error) {
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
		ClientCAs: pool, ConfirmTimeout: a.ConfirmTimeout.D(), Log: log})
	if err != nil {
		return nil, err
	}
	return &apiFence{f}, nil
}

// iface is the supervisor's APIFence: a nil *apiFence must become a nil
// interface, or the supervisor would call through it.
func (f *apiFence) iface() supervisor.APIFence {
	if f == nil {
		return nil
	}
	return f
}

// start points the gates at the supervisor's term and serves them.
func (f *apiFence) start(sup *supervisor.Supervisor) {
	if f == nil {
		return
	}
	f.SetTerm(func() gate.Term { return termOf(sup.Status()) })
	f.Serve()
}

func (f *apiFence) close() {
	if f != nil {
		f.Close()
	}
}

// termOf is the gates' question to the supervisor: this node holds the
// lease, is past the barrier (units allowed), and its fence deadline has
// not passed. The Fence adds "and this term's token is published".
func termOf(st supervisor.Status) gate.Term {
	switch {
	case st.State != supervisor.Active && st.State != supervisor.Promoting:
		return gate.Term{Reason: fmt.Sprintf("this node is %s; leader is %s (token %d)", st.State, orNone(st.Leader), st.LeaderToken)}
	case !st.UnitsAllowed || st.Token == 0:
		return gate.Term{Reason: fmt.Sprintf("this node is %s and units may not run now", st.State)}
	case st.FenceIn <= 0:
		return gate.Term{Reason: "the fence deadline has passed"}
	}
	return gate.Term{Open: true, Token: st.Token}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
