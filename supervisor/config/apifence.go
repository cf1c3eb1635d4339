package config

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// APIFence is the [api_fence] section: the fence at the API server
// (docs/architecture.md, "The fence at the API server").
type APIFence struct {
	// Mode: "off" (nothing), "gate" (per-unit API gates forward only while
	// this node's term is open; components' writes carry the token) or
	// "token" (gate, and the apiservers' admission policy refuses writes
	// without the current token; promotion publishes the token before
	// starting units and fails if it cannot).
	Mode string `toml:"mode"`
	// Kubeconfig is the supervisor's own credential for the apiservers.
	Kubeconfig string `toml:"kubeconfig"`
	// APIServers lists every apiserver endpoint the token is confirmed on
	// (https://host:port); token mode requires it (each publication checks
	// it against the apiservers the cluster knows); in gate mode empty
	// means the kubeconfig's server only. The gates forward to the first
	// that gives a connection, in this order.
	APIServers []string `toml:"apiservers"`
	// StateDir keeps the gates' local CA and serving certificates (0600).
	StateDir string `toml:"state_dir"`
	// ClientCA is the cluster CA the gates verify the components' client
	// certificates against (the apiserver's --client-ca-file).
	ClientCA string `toml:"client_ca"`
	// Gates are "UNIT=127.0.0.1:PORT": the loopback address of each managed
	// unit's gate. A managed unit without an entry is not gated.
	Gates []string `toml:"gates"`
	// ConfirmTimeout bounds the token handover at promotion (write plus
	// confirmation on every apiserver).
	ConfirmTimeout time.Duration `toml:"confirm_timeout"`
	// Webhook is the loopback host:port of the token webhook, which judges
	// every managed write by the parameter read with a quorum read: each
	// apiserver calls its own node's supervisor there (`api-fence
	// manifests` registers it beside the policy; with --webhook instead of
	// it, for clusters older than 1.30). Gate and token mode serve it;
	// "" (gate mode only) serves none.
	Webhook string `toml:"webhook"`
}

// DefaultWebhookAddr is api_fence.webhook's default.
const DefaultWebhookAddr = "127.0.0.1:16443"

// API fence modes.
const (
	APIFenceOff   = "off"
	APIFenceGate  = "gate"
	APIFenceToken = "token"
)

// APIFenceModes are the values of api_fence.mode, in the order status and
// metrics list them.
var APIFenceModes = []string{APIFenceOff, APIFenceGate, APIFenceToken}

// DefaultAPIFence is the section's default: off.
func DefaultAPIFence() APIFence {
	return APIFence{
		Mode:       APIFenceOff,
		Kubeconfig: "/etc/kha-supervisor/apiserver.kubeconfig",
		StateDir:   layout.StateDir,
		ClientCA:   "/etc/kubernetes/pki/ca.crt",
		Gates: []string{
			"kube-controller-manager.service=127.0.0.1:16441",
			"kube-scheduler.service=127.0.0.1:16442",
		},
		ConfirmTimeout: 10 * time.Second,
		// Used only once the mode is not off, as the gates.
		Webhook: DefaultWebhookAddr,
	}
}

// Enabled reports whether any gate runs.
func (a APIFence) Enabled() bool { return a.Mode == APIFenceGate || a.Mode == APIFenceToken }

// Gate is one parsed api_fence.gates entry.
type Gate struct {
	Unit string
	Addr string // host:port on loopback
}

// GateList parses api_fence.gates (Validate has checked it).
func (a APIFence) GateList() ([]Gate, error) {
	var out []Gate
	for i, e := range a.Gates {
		unit, addr, ok := strings.Cut(e, "=")
		if !ok || unit == "" {
			return nil, fmt.Errorf("entry %d: must be UNIT=127.0.0.1:PORT", i+1)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %q is not host:port", i+1, addr)
		}
		if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
			return nil, fmt.Errorf("entry %d: %s is not a loopback address; a gate serves only this node", i+1, host)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("entry %d: port must be 1-65535", i+1)
		}
		out = append(out, Gate{Unit: unit, Addr: addr})
	}
	return out, nil
}

// GateFor returns the gate of unit, if it has one.
func (a APIFence) GateFor(unit string) (Gate, bool) {
	gates, _ := a.GateList()
	for _, g := range gates {
		if g.Unit == unit {
			return g, true
		}
	}
	return Gate{}, false
}

func checkAPIFence(c Config) *Error {
	a := c.APIFence
	switch a.Mode {
	case APIFenceOff, APIFenceGate, APIFenceToken:
	default:
		return refuse(c, "api_fence.mode", `must be "off", "gate" or "token"`)
	}
	for _, f := range []struct{ key, path string }{
		{"api_fence.kubeconfig", a.Kubeconfig}, {"api_fence.state_dir", a.StateDir}, {"api_fence.client_ca", a.ClientCA},
	} {
		if !filepath.IsAbs(f.path) {
			return refuse(c, f.key, "must be an absolute path")
		}
	}
	for i, ep := range a.APIServers {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return &Error{Key: "api_fence.apiservers", Value: truncate(quote(ep)), Msg: fmt.Sprintf(`entry %d: must be https://host:port, e.g. "https://10.0.0.11:6443"`, i+1)}
		}
	}
	if e := checkGates(c); e != nil {
		return e
	}
	if e := checkWebhook(c); e != nil {
		return e
	}
	if err := positive(c, "api_fence.confirm_timeout"); err != nil {
		return err
	}
	if !a.Enabled() {
		return nil
	}
	if a.Mode == APIFenceToken && len(a.APIServers) == 0 {
		// The kubeconfig's server alone is often a load balancer: the
		// confirmation's two probes could reach different backends, and
		// an apiserver behind it would never be confirmed.
		return refuse(c, "api_fence.apiservers", `token mode needs every apiserver listed (https://host:port each), e.g. ["https://10.0.0.11:6443", "https://10.0.0.12:6443"]`)
	}
	if _, _, err := readLimited(a.Kubeconfig); err != nil {
		return unreadable(c, "api_fence.kubeconfig", err)
	}
	pem, _, err := readLimited(a.ClientCA)
	if err != nil {
		return unreadable(c, "api_fence.client_ca", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return refuse(c, "api_fence.client_ca", "holds no PEM certificate")
	}
	return nil
}

func checkGates(c Config) *Error {
	gates, err := c.APIFence.GateList()
	if err != nil {
		return refuse(c, "api_fence.gates", "%v", err)
	}
	units, addrs := map[string]bool{}, map[string]bool{}
	for i, g := range gates {
		switch {
		// Membership matters only once gates run: the default entries name
		// the default units, and a file that renames its units but leaves
		// the fence off must still load.
		case c.APIFence.Enabled() && !slices.Contains(c.Units.Managed, g.Unit):
			return refuse(c, "api_fence.gates", "entry %d: %s is not in units.managed", i+1, g.Unit)
		case units[g.Unit]:
			return refuse(c, "api_fence.gates", "entry %d: %s has two gates", i+1, g.Unit)
		case addrs[g.Addr]:
			return refuse(c, "api_fence.gates", "entry %d: %s is used by two gates", i+1, g.Addr)
		}
		units[g.Unit], addrs[g.Addr] = true, true
	}
	return nil
}

func checkWebhook(c Config) *Error {
	a := c.APIFence
	if a.Webhook == "" {
		if a.Mode == APIFenceToken {
			// The policy alone judges by each apiserver's cache, which a
			// paused or healed apiserver holds stale (docs/architecture.md,
			// "The webhook as the authority").
			return refuse(c, "api_fence.webhook", "token mode needs the webhook (a loopback host:port, default %q): it is the authority on a stale token", DefaultWebhookAddr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(a.Webhook)
	if ip := net.ParseIP(host); err != nil || ((ip == nil || !ip.IsLoopback()) && host != "localhost") {
		return refuse(c, "api_fence.webhook", "must be a loopback host:port, e.g. \"127.0.0.1:16443\" (each apiserver calls its own node)")
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return refuse(c, "api_fence.webhook", "port must be 1-65535")
	}
	gates, _ := a.GateList()
	for _, g := range gates {
		if g.Addr == a.Webhook {
			return refuse(c, "api_fence.webhook", "is also the gate of %s", g.Unit)
		}
	}
	return nil
}
