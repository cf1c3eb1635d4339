package plane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// The fence at the API server in the lab (api_fence.mode): the kha modes
// named kha-PROFILE-gate and kha-PROFILE-token. Installed as an operator
// would (docs/operations.md, "Fencing at the API server"): the manifests
// from `kha-supervisor api-fence manifests` applied with kubectl, the
// supervisors' own credential (user kha-supervisor), [api_fence] in their
// configuration, the units' kubeconfigs at kubeadm's paths inside the
// masters, pointed at the gates by `kha-supervisor install-kubeconfig`.
const (
	FenceGate  = "gate"
	FenceToken = "token"
)

// FencedMode runs the components under kha-supervisor with profile p and
// api_fence.mode fence.
func FencedMode(p lab.Profile, fence string) Mode {
	m := KhaMode(p)
	m.Name += "-" + fence
	m.Fence = fence
	return m
}

// supervisorUser is the supervisors' identity at the apiservers (the
// manifests' default).
const supervisorUser = "kha-supervisor"

// NodeKubeconfigs are where a fenced mode puts each unit's kubeconfig in
// the master (kubeadm's paths, install-kubeconfig's defaults): the
// plane's directory is read-only there, and install-kubeconfig rewrites
// the file in place.
var NodeKubeconfigs = map[string]string{
	kube.Scheduler:         "/etc/kubernetes/scheduler.conf",
	kube.ControllerManager: "/etc/kubernetes/controller-manager.conf",
}

// nodeKubeconfig copies the component's kubeconfig (pointing at its
// master's apiserver, its own certificate) into n and returns the path.
func nodeKubeconfig(n *master.Node, name, host string) (string, error) {
	b, err := os.ReadFile(host)
	if err != nil {
		return "", fmt.Errorf("plane: %w", err)
	}
	dst := NodeKubeconfigs[name]
	return dst, n.WriteFile(dst, b, 0o600)
}

// clientPair is the CA's client certificate of user, issued once: a
// changed certificate file makes client-go close its connections.
func clientPair(ca *pki.CA, user string, groups ...string) (pki.Pair, error) {
	dir := filepath.Dir(ca.CertFile)
	p := pki.Pair{CertFile: filepath.Join(dir, "client-"+user+".crt"), KeyFile: filepath.Join(dir, "client-"+user+".key")}
	if _, err := os.Stat(p.KeyFile); err == nil {
		if _, err := os.Stat(p.CertFile); err == nil {
			return p, nil
		}
	}
	return ca.KubeClient(user, groups...)
}

// supervisorKubeconfig is master m's supervisor credential, at its own
// apiserver.
func (p *Plane) supervisorKubeconfig(m string) (string, error) {
	ca, err := p.CA()
	if err != nil {
		return "", err
	}
	a, err := p.APIServer(m)
	if err != nil {
		return "", err
	}
	pair, err := clientPair(ca, supervisorUser)
	if err != nil {
		return "", err
	}
	path := p.Dir(m, "kha-supervisor.kubeconfig")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", fmt.Errorf("plane: %w", err)
	}
	return path, kube.WriteKubeconfig(path, a.URL(), ca.CertFile, supervisorUser, pair)
}

// fenceEdit sets [api_fence] for mode: the master's own apiserver first
// (the gates forward to it), the other one too (the token is confirmed on
// both).
func (p *Plane) fenceEdit(mode Mode) (func(node string, c *config.Config), error) {
	kcs := map[string]string{}
	urls := map[string]string{}
	for _, m := range lab.MasterNames {
		kc, err := p.supervisorKubeconfig(m)
		if err != nil {
			return nil, err
		}
		a, err := p.APIServer(m)
		if err != nil {
			return nil, err
		}
		kcs[m], urls[m] = kc, a.URL()
	}
	ca, err := p.CA()
	if err != nil {
		return nil, err
	}
	return func(node string, c *config.Config) {
		c.APIFence.Mode = mode.Fence
		c.APIFence.Kubeconfig = kcs[node]
		c.APIFence.APIServers = []string{urls[node], urls[other(node)]}
		c.APIFence.ClientCA = ca.CertFile
	}, nil
}

// SupervisorLab is the lab that installs the supervisors of mode (its
// profile, and [api_fence] for a fenced mode).
func (p *Plane) SupervisorLab(mode Mode) (*lab.Lab, error) {
	l := p.Lab.WithProfile(mode.Profile)
	if mode.EtcdFence {
		l = l.WithConfigEdit(etcdFenceEdit)
	}
	if mode.Fence == "" {
		return l, nil
	}
	edit, err := p.fenceEdit(mode)
	if err != nil {
		return nil, err
	}
	return l.WithConfigEdit(edit), nil
}

// StartSupervisor installs and starts n's supervisor in mode. A fenced
// mode first writes the configuration and points the units' kubeconfigs
// at the gates (install-kubeconfig reads api_fence.gates), so that no unit
// starts on a kubeconfig that bypasses its gate.
func (p *Plane) StartSupervisor(ctx context.Context, n *master.Node, mode Mode) error {
	l, err := p.SupervisorLab(mode)
	if err != nil {
		return err
	}
	if mode.EtcdFence {
		if err := p.EnsureEtcdAuth(ctx); err != nil {
			return err
		}
	}
	if mode.Fence != "" {
		if err := n.WriteFile(lab.SupervisorConfig, l.SupervisorConfigFor(n.Name), 0o600); err != nil {
			return err
		}
		for _, u := range Units {
			out, err := n.Exec(ctx, layout.Binary, "install-kubeconfig", u+".service", "-c", lab.SupervisorConfig)
			if err != nil {
				return fmt.Errorf("plane: install-kubeconfig %s on %s: %w: %s", u, n.Name, err, out)
			}
			p.Log.Debug("plane: install-kubeconfig", "master", n.Name, "unit", u, "out", strings.TrimSpace(string(out)))
		}
	}
	return l.InstallSupervisor(ctx, n)
}

// ApplyFence puts the apiservers' side of mode in place, as an operator
// would: for token mode every manifest of `kha-supervisor api-fence
// manifests` (the parameter only when missing: the guard refuses an
// admin's change of it, and it holds the last term's token), for gate mode
// the RBAC only; every other mode sets the policy's binding to Audit
// first, which turns the enforcement off at once (docs/operations.md,
// "Turning it off"). Deleting the binding instead left token mode unable to
// come back: after it was re-created both apiservers refused the current
// token as well (the last 55 runs of this lab, and fence2's).
func (p *Plane) ApplyFence(ctx context.Context, mode Mode) error {
	if mode.Fence != FenceToken {
		// Without a supervisor serving the token webhook its registration
		// refuses every managed write (failurePolicy Fail).
		if _, err := p.kubectl(ctx, nil, "delete", "validatingwebhookconfiguration", "kha-fencing-token", "--ignore-not-found"); err != nil {
			return err
		}
		have, err := p.kubectl(ctx, nil, "get", "validatingadmissionpolicybinding", "kha-fencing-token", "--ignore-not-found", "-o", "name")
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(have)) > 0 {
			if _, err := p.kubectl(ctx, nil, "patch", "validatingadmissionpolicybinding", "kha-fencing-token", "--type", "merge",
				"-p", `{"spec":{"validationActions":["Audit"]}}`); err != nil {
				return err
			}
		}
		if mode.Fence != FenceGate {
			return nil
		}
		y, err := p.manifests(ctx, "--rbac-only")
		if err != nil {
			return err
		}
		_, err = p.kubectl(ctx, y, "apply", "-f", "-")
		return err
	}
	// --token 0: the parameter is only created when missing, before any
	// token-mode leader; the first promotion publishes its token. The
	// webhook's registration trusts both masters' gate CAs.
	bundle, err := p.gateCAs(ctx)
	if mode.PolicyOnly {
		if _, err := p.kubectl(ctx, nil, "delete", "validatingwebhookconfiguration", "kha-fencing-token", "--ignore-not-found"); err != nil {
			return err
		}
	}
	if err != nil {
		// A supervisor from before the webhook became token mode's
		// authority (no `api-fence ca`): the policy alone, as then; the
		// scenarios that need the webhook (58, 59) fail on it.
		p.Log.Warn("plane: token mode without the webhook: a master's supervisor cannot print its gate CA", "err", err)
		bundle = nil
	}
	y, err := p.manifests(ctx, append([]string{"--token", "0"}, bundle...)...)
	if err != nil {
		return err
	}
	var rest, param [][]byte
	for _, doc := range bytes.Split(y, []byte("\n---\n")) {
		switch {
		case bytes.Contains(doc, []byte("\nkind: ConfigMap\n")):
			param = append(param, doc)
		case mode.PolicyOnly && bytes.Contains(doc, []byte("\nkind: ValidatingWebhookConfiguration\n")):
			// the policy alone (Mode.PolicyOnly)
		default:
			rest = append(rest, doc)
		}
	}
	if len(param) != 1 {
		return fmt.Errorf("plane: api-fence manifests hold %d ConfigMaps, want the parameter alone", len(param))
	}
	// The guard refuses even the admin's create of an existing parameter
	// (admission runs before the AlreadyExists check).
	have, err := p.kubectl(ctx, nil, "get", "configmap", "-n", "kube-system", "kha-fencing-token", "--ignore-not-found", "-o", "name")
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(have)) == 0 {
		if _, err := p.kubectl(ctx, param[0], "create", "-f", "-"); err != nil {
			return err
		}
	}
	if _, err := p.kubectl(ctx, bytes.Join(rest, []byte("\n---\n")), "apply", "-f", "-"); err != nil {
		return err
	}
	// apply leaves a field alone that its last apply set the same way, so
	// the Audit a fence-less mode patched in must be patched back.
	_, err = p.kubectl(ctx, nil, "patch", "validatingadmissionpolicybinding", "kha-fencing-token", "--type", "merge",
		"-p", `{"spec":{"validationActions":["Deny"]}}`)
	return err
}

// gateCAs collects each master's gate CA as an operator would (`kha-supervisor
// api-fence ca` on each node) into the lab's shared directory, and returns
// the --ca-bundle arguments naming them.
func (p *Plane) gateCAs(ctx context.Context) ([]string, error) {
	nodes, err := p.Lab.Masters()
	if err != nil {
		return nil, err
	}
	var args []string
	for _, m := range lab.MasterNames {
		pem, err := nodes[m].Exec(ctx, layout.Binary, "api-fence", "ca", "-c", lab.SupervisorConfig)
		if err != nil {
			return nil, fmt.Errorf("plane: the gate CA of %s: %w", m, err)
		}
		path := p.Lab.SharedPath("kube", "gate-ca-"+m+".crt")
		if err := os.WriteFile(path, pem, 0o644); err != nil {
			return nil, err
		}
		args = append(args, "--ca-bundle", path)
	}
	return args, nil
}

// manifests runs the lab's kha-supervisor api-fence manifests.
func (p *Plane) manifests(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, p.Lab.SharedPath("bin", "kha-supervisor"), append([]string{"api-fence", "manifests"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("plane: kha-supervisor api-fence manifests: %w: %s", err, stderr.String())
	}
	return out, nil
}

// kubectl runs kubectl as the admin from the observer's namespace, at the
// first apiserver that answers. Its combined output is returned.
func (p *Plane) kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	ca, err := p.CA()
	if err != nil {
		return nil, err
	}
	admin, err := clientPair(ca, "admin", "system:masters")
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, m := range lab.MasterNames {
		a, err := p.APIServer(m)
		if err != nil {
			return nil, err
		}
		kc := p.Dir("admin-" + m + ".kubeconfig")
		if err := kube.WriteKubeconfig(kc, a.URL(), ca.CertFile, "admin", admin); err != nil {
			return nil, err
		}
		argv := append([]string{"netns", "exec", p.Lab.Topo.NetNS("obs"), "kubectl", "--kubeconfig", kc, "--request-timeout", "10s"}, args...)
		cmd := exec.CommandContext(ctx, "ip", argv...)
		cmd.Stdin = bytes.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err == nil {
			p.Log.Debug("plane: kubectl", "args", strings.Join(args, " "), "out", strings.TrimSpace(string(out)))
			return out, nil
		}
		errs = append(errs, fmt.Errorf("kubectl %s at %s: %w: %s", strings.Join(args, " "), m, err, out))
	}
	return nil, fmt.Errorf("plane: %w", errors.Join(errs...))
}

// HeldToken is the token the parameter holds (0: none or no parameter),
// read as the admin.
func (p *Plane) HeldToken(ctx context.Context) (int64, error) {
	out, err := p.kubectl(ctx, nil, "get", "configmap", "-n", "kube-system", "kha-fencing-token", "-o", "jsonpath={.data.token}")
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(out))
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// judgeFence judges a fenced mode's trial at the resource (writes of a
// stale term accepted, refusals by the policy) and runs the scenario's
// own Judge, over the same window as judge.
func (r *Runner) judgeFence(s Spec, t *Trial, res *report.Result, end time.Time) {
	if t.Mode.Fence == "" && s.Judge == nil {
		return
	}
	evs, err := audit.ReadFiles(r.P.AuditLogs())
	if err != nil {
		res.Problems = append(res.Problems, err.Error())
		return
	}
	o := audit.Options{From: res.FaultAt.Add(-judgedBefore), To: end, Masters: r.P.MasterIPs()}
	if t.Mode.Fence != "" {
		rep := audit.Fence(evs, o)
		res.Fence = rep.String()
		res.Stale, res.Refused = len(rep.Stale), rep.Refused
		for i, w := range rep.Stale {
			if i == 10 {
				res.StaleWrites = append(res.StaleWrites, fmt.Sprintf("... and %d more", len(rep.Stale)-i))
				break
			}
			res.StaleWrites = append(res.StaleWrites, w.String())
		}
	}
	if s.Judge != nil {
		if res.Figures.Values == nil {
			res.Figures.Values = map[string]float64{}
		}
		for k, v := range t.Figs {
			res.Figures.Values[k] = v
		}
		s.Judge(t, evs, res)
	}
}
