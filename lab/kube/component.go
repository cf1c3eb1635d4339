package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// The components the lab runs against an apiserver.
const (
	Scheduler         = "kube-scheduler"
	ControllerManager = "kube-controller-manager"
)

// users are the identities RBAC's bootstrap policy grants the components.
var users = map[string]string{
	Scheduler:         "system:kube-scheduler",
	ControllerManager: "system:kube-controller-manager",
}

// Component is one kube-scheduler or kube-controller-manager talking to one
// apiserver.
type Component struct {
	Name   string // Scheduler or ControllerManager
	Binary string
	Dir    string  // its state: certificate, kubeconfig, log, PID file
	CA     *pki.CA // the apiserver's CA: issues its client and serving certificates
	Server string  // the apiserver's URL (APIServer.URL)
	// Address and Port are its secure (healthz, metrics) port's.
	Address string
	Port    int
	// LeaderElect runs client-go leader election (the lab's comparison);
	// false is how kha-supervisor runs it: it alone decides who runs.
	LeaderElect bool
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election
	// (only with LeaderElect); zero keeps client-go's 15 s / 10 s / 2 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ServiceAccountKey (controller-manager only) is the apiserver's
	// signing key (Files.ServiceAccount), for the token controller.
	ServiceAccountKey string
	ReadyTimeout      time.Duration // wait for /healthz; 2 minutes if 0
	// StopTimeout, when set, is the unit's TimeoutStopSec (Unit): what
	// install-dropins writes for the supervisor's units.stop_timeout, set
	// in the unit itself so that check-config accepts it before the
	// drop-ins exist.
	StopTimeout time.Duration
}

// ComponentFiles are what Prepare writes into Dir.
type ComponentFiles struct {
	Client     pki.Pair // its identity at the apiserver
	Serving    pki.Pair // its secure port's certificate
	Kubeconfig string
	Log        string
	PIDFile    string
}

func (c Component) files() ComponentFiles {
	return ComponentFiles{
		Kubeconfig: filepath.Join(c.Dir, c.Name+".kubeconfig"),
		Log:        filepath.Join(c.Dir, c.Name+".log"),
		PIDFile:    filepath.Join(c.Dir, c.Name+".pid"),
	}
}

func (c Component) check() error {
	if _, ok := users[c.Name]; !ok {
		return fmt.Errorf("component %q: not %s or %s", c.Name, Scheduler, ControllerManager)
	}
	if c.Binary == "" || c.Dir == "" || c.CA == nil || c.Server == "" || c.Address == "" || c.Port <= 0 || c.Port > 65535 {
		return fmt.Errorf("%s: Binary, Dir, CA, Server, Address and Port are required", c.Name)
	}
	if c.Name == ControllerManager && c.ServiceAccountKey == "" {
		return fmt.Errorf("%s: ServiceAccountKey is required", c.Name)
	}
	return nil
}

// Prepare issues the component's certificates and writes its kubeconfig.
func (c Component) Prepare() (ComponentFiles, error) {
	if err := c.check(); err != nil {
		return ComponentFiles{}, err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return ComponentFiles{}, fmt.Errorf("%s: %w", c.Name, err)
	}
	f := c.files()
	var err error
	if f.Client, err = c.CA.KubeClient(users[c.Name]); err != nil {
		return ComponentFiles{}, err
	}
	if f.Serving, err = c.CA.Server(c.Name+"-"+certName(c.Address, c.Port), c.Address); err != nil {
		return ComponentFiles{}, err
	}
	if err := WriteKubeconfig(f.Kubeconfig, c.Server, c.CA.CertFile, users[c.Name], f.Client); err != nil {
		return ComponentFiles{}, fmt.Errorf("%s: %w", c.Name, err)
	}
	return f, nil
}

// Args are the component's flags, those kubeadm sets (the kubeconfig for
// its work and for delegated authentication and authorization of its
// secure port) plus what the lab needs.
func (c Component) Args(f ComponentFiles) []string {
	args := []string{
		"--kubeconfig=" + f.Kubeconfig,
		"--authentication-kubeconfig=" + f.Kubeconfig,
		"--authorization-kubeconfig=" + f.Kubeconfig,
		"--bind-address=" + c.Address,
		"--secure-port=" + strconv.Itoa(c.Port),
		"--tls-cert-file=" + f.Serving.CertFile,
		"--tls-private-key-file=" + f.Serving.KeyFile,
		"--leader-elect=" + strconv.FormatBool(c.LeaderElect),
	}
	if c.LeaderElect {
		for _, o := range []struct {
			flag string
			d    time.Duration
		}{
			{"--leader-elect-lease-duration", c.LeaseDuration},
			{"--leader-elect-renew-deadline", c.RenewDeadline},
			{"--leader-elect-retry-period", c.RetryPeriod},
		} {
			if o.d > 0 {
				args = append(args, o.flag+"="+o.d.String())
			}
		}
	}
	if c.Name == ControllerManager {
		args = append(args,
			"--client-ca-file="+c.CA.CertFile,
			"--requestheader-client-ca-file="+c.CA.CertFile,
			"--root-ca-file="+c.CA.CertFile,
			"--service-account-private-key-file="+c.ServiceAccountKey,
			"--cluster-signing-cert-file="+c.CA.CertFile,
			"--cluster-signing-key-file="+c.CA.KeyFile,
			// Each controller acts as its own service account (as kubeadm
			// sets): under RBAC the controller-manager's own user may not
			// do what its controllers do, and the audit log names the
			// controller that wrote.
			"--use-service-account-credentials=true",
		)
	}
	return args
}

// Start prepares the files, starts the component detached and waits until
// its /healthz answers 200.
func (c Component) Start(ctx context.Context) (ComponentFiles, error) {
	f, err := c.Prepare()
	if err != nil {
		return ComponentFiles{}, err
	}
	argv := append([]string{c.Binary}, c.Args(f)...)
	if _, err := proc.Start(proc.Spec{Argv: argv, PIDFile: f.PIDFile, LogFile: f.Log, Dir: c.Dir}); err != nil {
		return ComponentFiles{}, fmt.Errorf("%s: %w", c.Name, err)
	}
	timeout := c.ReadyTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	// /healthz is in the components' always-allowed paths: no client
	// certificate needed, only trust in the serving certificate.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}}}
	url := c.HealthURL()
	if err := waitHTTP(ctx, f.PIDFile, client, url, timeout); err != nil {
		stopErr := proc.Stop(context.WithoutCancel(ctx), f.PIDFile, 10*time.Second)
		return ComponentFiles{}, errors.Join(fmt.Errorf("%s on %s: %w\n%s", c.Name, url, err, tail(f.Log, 15)), stopErr)
	}
	return f, nil
}

// HealthURL is the component's /healthz on its secure port: what the lab
// waits for at start and what kha-supervisor's [health] probe GETs.
func (c Component) HealthURL() string {
	return "https://" + joinHostPort(c.Address, c.Port) + "/healthz"
}

// Stop ends the component recorded in its PID file.
func (c Component) Stop(ctx context.Context, grace time.Duration) error {
	return proc.Stop(ctx, c.files().PIDFile, grace)
}

// Running reports the component's process, if it runs.
func (c Component) Running() (proc.ID, bool) {
	return proc.Running(c.files().PIDFile)
}

// WriteKubeconfig writes a kubeconfig with one cluster (server, trusted
// CA), one user (a client certificate) and a context joining them.
func WriteKubeconfig(path, server, caFile, user string, pair pki.Pair) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["lab"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: pair.CertFile, ClientKey: pair.KeyFile}
	cfg.Contexts["lab"] = &clientcmdapi.Context{Cluster: "lab", AuthInfo: user}
	cfg.CurrentContext = "lab"
	return clientcmd.WriteToFile(*cfg, path)
}
