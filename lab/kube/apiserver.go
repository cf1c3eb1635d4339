// Package kube runs the real Kubernetes control plane for the lab: the
// binaries come from lab/kube/build, the certificates from internal/pki.
// Processes are started detached and stopped by PID file (lab/proc), so a
// lab command can stop what an earlier one started.
package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// Etcd is how an apiserver reaches its storage.
type Etcd struct {
	Endpoints []string
	// CAFile, CertFile and KeyFile: TLS to etcd with a client certificate;
	// all empty for plain HTTP.
	CAFile, CertFile, KeyFile string
	// Prefix keeps this control plane's objects apart from anything else in
	// the same etcd (the supervisors' lease keys); "/registry" if empty.
	Prefix string
}

// APIServer describes one kube-apiserver.
type APIServer struct {
	Binary string  // the kube-apiserver binary (build.Binaries.Path)
	Dir    string  // its state: keys, audit policy and log, stderr log, PID file
	CA     *pki.CA // issues its serving certificate and trusts its clients
	Etcd   Etcd
	// Address is the loopback or lab address it binds and advertises.
	Address string
	Port    int
	// ServiceCIDR is the cluster's service range; 10.96.0.0/16 if empty.
	ServiceCIDR string
	// ReadyTimeout bounds the wait for /readyz; 3 minutes if 0 (a fresh
	// apiserver on a loaded 2-core machine can take a minute).
	ReadyTimeout time.Duration
	// NetNS, when set, is the named network namespace (ip netns) the
	// process runs in: the lab's masters.
	NetNS string
	// Hostname, when set, is the process's own host name (a UTS namespace
	// of its own): the apiserver's identity lease is named after its
	// host name, and two apiservers sharing one collide.
	Hostname string
	// Dial, when set, is how Client connects (from a namespace that routes
	// to Address; the host has no route into the lab).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Files are what Prepare writes into Dir.
type Files struct {
	Serving        pki.Pair // the apiserver's serving certificate
	Admin          pki.Pair // client certificate of user admin in group system:masters
	ServiceAccount string   // private key signing service-account tokens
	ServiceKey     string   // its public key, verifying them
	AuditPolicy    string
	AuditLog       string
	Log            string // the process's stderr and stdout
	PIDFile        string
}

func (a APIServer) files() Files {
	return Files{
		ServiceAccount: filepath.Join(a.Dir, "sa.key"),
		ServiceKey:     filepath.Join(a.Dir, "sa.pub"),
		AuditPolicy:    filepath.Join(a.Dir, "audit-policy.yaml"),
		AuditLog:       filepath.Join(a.Dir, "audit.log"),
		Log:            filepath.Join(a.Dir, "kube-apiserver.log"),
		PIDFile:        filepath.Join(a.Dir, "kube-apiserver.pid"),
	}
}

// AdminPair is the admin's client certificate as Prepare last issued it,
// without issuing it again: a re-issue changes the files under every
// client that uses them, and client-go then closes those clients'
// connections when it reloads them.
func (a APIServer) AdminPair() pki.Pair {
	return a.CA.ClientPair("admin")
}

// URL is the apiserver's base URL.
func (a APIServer) URL() string {
	return "https://" + joinHostPort(a.Address, a.Port)
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

func (a APIServer) check() error {
	var missing []string
	for name, v := range map[string]string{"Binary": a.Binary, "Dir": a.Dir, "Address": a.Address} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if a.CA == nil {
		missing = append(missing, "CA")
	}
	if a.Port <= 0 || a.Port > 65535 {
		missing = append(missing, "Port")
	}
	if len(a.Etcd.Endpoints) == 0 {
		missing = append(missing, "Etcd.Endpoints")
	}
	if len(missing) > 0 {
		return fmt.Errorf("kube-apiserver: missing or invalid %s", strings.Join(missing, ", "))
	}
	return nil
}

// Prepare writes the apiserver's certificates, service-account key pair and
// audit policy into Dir. Calling it again re-issues the certificates and
// keeps the service-account key (tokens already issued stay valid).
func (a APIServer) Prepare() (Files, error) {
	if err := a.check(); err != nil {
		return Files{}, err
	}
	if err := os.MkdirAll(a.Dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("kube-apiserver: %w", err)
	}
	f := a.files()
	var err error
	// The service IP of "kubernetes" (first address of the service range) is
	// what in-cluster clients dial; the name is what they verify.
	if f.Serving, err = a.CA.Server("kube-apiserver-"+certName(a.Address, a.Port), a.Address, firstServiceIP(a.serviceCIDR()),
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"); err != nil {
		return Files{}, err
	}
	if f.Admin, err = a.CA.KubeClient("admin", "system:masters"); err != nil {
		return Files{}, err
	}
	if err := writeKeyPair(f.ServiceAccount, f.ServiceKey); err != nil {
		return Files{}, fmt.Errorf("kube-apiserver: service-account key: %w", err)
	}
	if err := os.WriteFile(f.AuditPolicy, []byte(auditPolicy), 0o644); err != nil {
		return Files{}, fmt.Errorf("kube-apiserver: %w", err)
	}
	return f, nil
}

func (a APIServer) serviceCIDR() string {
	if a.ServiceCIDR == "" {
		return "10.96.0.0/16"
	}
	return a.ServiceCIDR
}

// Start prepares the files, starts the apiserver detached (recorded in its
// PID file) and waits until /readyz answers 200 to the admin. On failure the
// process is stopped and the error ends with the tail of its log.
func (a APIServer) Start(ctx context.Context) (Files, error) {
	f, err := a.Prepare()
	if err != nil {
		return Files{}, err
	}
	return f, a.StartPrepared(ctx, f)
}

// StartPrepared is Start with the files Prepare wrote. Apiservers sharing
// a CA are prepared one after the other and started together: Prepare
// re-issues the shared admin certificate, and two at once can leave its key
// and certificate from different issues ("private key does not match
// public key").
func (a APIServer) StartPrepared(ctx context.Context, f Files) error {
	argv := append([]string{a.Binary}, a.Args(f)...)
	if a.Hostname != "" {
		argv = append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, a.Hostname}, argv...)
	}
	if a.NetNS != "" {
		argv = append([]string{"ip", "netns", "exec", a.NetNS}, argv...)
	}
	if _, err := proc.Start(proc.Spec{Argv: argv, PIDFile: f.PIDFile, LogFile: f.Log, Dir: a.Dir}); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := a.waitReady(ctx, f); err != nil {
		stopErr := proc.Stop(context.WithoutCancel(ctx), f.PIDFile, 10*time.Second)
		return errors.Join(fmt.Errorf("kube-apiserver on %s: %w\n%s", a.URL(), err, tail(f.Log, 15)), stopErr)
	}
	return nil
}

// Stop ends the apiserver recorded in Dir's PID file: SIGTERM, then SIGKILL
// after grace. Nothing running is not an error.
func (a APIServer) Stop(ctx context.Context, grace time.Duration) error {
	return proc.Stop(ctx, a.files().PIDFile, grace)
}

// Running reports the apiserver's process, if it runs.
func (a APIServer) Running() (proc.ID, bool) {
	return proc.Running(a.files().PIDFile)
}

// waitReady polls /readyz as the admin. A fresh apiserver answers
// connection refused, then 500 while its post-start hooks run (and 403 to
// anonymous clients until RBAC is bootstrapped); only 200 is ready.
func (a APIServer) waitReady(ctx context.Context, f Files) error {
	timeout := a.ReadyTimeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	c, err := a.Client(f.Admin)
	if err != nil {
		return err
	}
	return waitHTTP(ctx, f.PIDFile, c, a.URL()+"/readyz", timeout)
}

// waitHTTP polls url until it answers 200. The process recorded in pidFile
// dying ends the wait at once.
func waitHTTP(ctx context.Context, pidFile string, c *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := "no answer yet"
	for {
		if _, ok := proc.Running(pidFile); !ok {
			return fmt.Errorf("exited before ready (last %s: %s)", url, last)
		}
		last = probe(ctx, c, url)
		if last == "200" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s (last %s: %s)", timeout, url, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func probe(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK {
		return "200"
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
}

// Client is an HTTPS client presenting pair and trusting only the lab CA.
func (a APIServer) Client(pair pki.Pair) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("kube-apiserver client: %w", err)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: a.Dial, TLSClientConfig: &tls.Config{
			RootCAs: a.CA.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		}},
	}, nil
}

// tail returns the last n lines of a log, for an error message.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "last lines of " + path + ":\n  " + strings.Join(lines, "\n  ")
}
