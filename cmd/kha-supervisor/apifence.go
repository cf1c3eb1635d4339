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
	register("api-fence", "the fence at the API server: `api-fence manifests` prints what to kubectl apply", apiFenceCmd)
}

// apiFenceCmd: `kha-supervisor api-fence manifests [--supervisor-user U]...`.
func apiFenceCmd(e env, args []string) int {
	if len(args) == 0 || args[0] != "manifests" {
		fmt.Fprintln(e.stderr, "usage: kha-supervisor api-fence manifests [--supervisor-user USER]...")
		return exitConfig
	}
	fs := flag.NewFlagSet("api-fence manifests", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var users multiFlag
	fs.Var(&users, "supervisor-user", "user of the supervisors' own credential (repeatable; default "+apifence.DefaultSupervisorUser+")")
	if err := fs.Parse(args[1:]); err != nil {
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
	y, err := apifence.Build(apifence.ManifestOptions{SupervisorUsers: users}).YAML()
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

// newAPIFence builds the fence the configuration asks for; nil when off.
func newAPIFence(cfg config.Config, log *slog.Logger) (*apiFence, error) {
	a := cfg.APIFence
	if !a.Enabled() {
		return nil, nil
	}
	base, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("api_fence.kubeconfig %s: %w", a.Kubeconfig, err)
	}
	if base.Impersonate.UserName != "" {
		return nil, fmt.Errorf("api_fence.kubeconfig %s: must not impersonate (it names %q)", a.Kubeconfig, base.Impersonate.UserName)
	}
	ups := []*rest.Config{base}
	if len(a.APIServers) > 0 {
		ups = nil
		for _, h := range a.APIServers {
			c := rest.CopyConfig(base)
			c.Host = h
			ups = append(ups, c)
		}
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
