package kube

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

func testAPIServer(t *testing.T) APIServer {
	t.Helper()
	ca, err := pki.NewCA(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	return APIServer{
		Binary: "/cache/v1.37.2/kube-apiserver", Dir: filepath.Join(t.TempDir(), "apiserver"), CA: ca,
		Etcd:    Etcd{Endpoints: []string{"https://127.0.0.1:2379", "https://127.0.0.1:2380"}, CAFile: "/e/ca.crt", CertFile: "/e/c.crt", KeyFile: "/e/c.key", Prefix: "/lab"},
		Address: "127.0.0.1", Port: 16443,
	}
}

func TestArgsCarryTLSRBACAuditAndEtcd(t *testing.T) {
	a := testAPIServer(t)
	f, err := a.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	args := a.Args(f)
	for _, want := range []string{
		"--secure-port=16443",
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + f.Serving.CertFile,
		"--client-ca-file=" + a.CA.CertFile,
		"--requestheader-client-ca-file=" + a.CA.CertFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-key-file=" + f.ServiceKey,
		"--service-account-signing-key-file=" + f.ServiceAccount,
		"--audit-log-path=" + f.AuditLog,
		"--audit-policy-file=" + f.AuditPolicy,
		"--etcd-servers=https://127.0.0.1:2379,https://127.0.0.1:2380",
		"--etcd-prefix=/lab",
		"--etcd-cafile=/e/ca.crt",
		"--etcd-certfile=/e/c.crt",
		"--etcd-keyfile=/e/c.key",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("args lack %s:\n%s", want, strings.Join(args, "\n"))
		}
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") {
			t.Errorf("argument %q is not --flag=value", a)
		}
	}
}

func TestArgsKeepTheEndpointReconcilerOffLoopback(t *testing.T) {
	a := testAPIServer(t)
	a.Address = "10.10.1.11"
	if args := a.Args(Files{}); slices.Contains(args, "--endpoint-reconciler-type=none") {
		t.Error("a lab address turned the endpoint reconciler off")
	}
}

func TestArgsPlainEtcdHasNoTLSFlags(t *testing.T) {
	a := testAPIServer(t)
	a.Etcd = Etcd{Endpoints: []string{"http://127.0.0.1:2379"}}
	for _, arg := range a.Args(Files{}) {
		if strings.HasPrefix(arg, "--etcd-") && !strings.HasPrefix(arg, "--etcd-servers=") {
			t.Errorf("plain etcd got %s", arg)
		}
	}
}

func TestPrepareWritesKeysOnceAndCertificates(t *testing.T) {
	a := testAPIServer(t)
	f, err := a.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(f.ServiceAccount)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(f.ServiceAccount); st.Mode().Perm() != 0o600 {
		t.Errorf("service-account key mode %v, want 0600", st.Mode().Perm())
	}
	pub, _ := pem.Decode(mustRead(t, f.ServiceKey))
	if pub == nil || pub.Type != "PUBLIC KEY" {
		t.Fatalf("public key file %s is not a PEM public key", f.ServiceKey)
	}
	if _, err := x509.ParsePKIXPublicKey(pub.Bytes); err != nil {
		t.Error(err)
	}
	admin := loadCert(t, f.Admin.CertFile)
	if admin.Subject.CommonName != "admin" || !slices.Contains(admin.Subject.Organization, "system:masters") {
		t.Errorf("admin subject %v", admin.Subject)
	}
	serving := loadCert(t, f.Serving.CertFile)
	if err := serving.VerifyHostname("10.96.0.1"); err != nil {
		t.Errorf("serving certificate does not cover the kubernetes service IP: %v", err)
	}
	if err := serving.VerifyHostname("kubernetes.default.svc"); err != nil {
		t.Error(err)
	}
	if !strings.Contains(string(mustRead(t, f.AuditPolicy)), "level: Metadata") {
		t.Error("audit policy records nothing")
	}
	if _, err := a.Prepare(); err != nil {
		t.Fatal(err)
	}
	if again := mustRead(t, f.ServiceAccount); string(again) != string(key) {
		t.Error("a second Prepare replaced the service-account key: issued tokens would stop verifying")
	}
}

func TestPrepareNamesWhatIsMissing(t *testing.T) {
	_, err := APIServer{Port: 70000}.Prepare()
	if err == nil {
		t.Fatal("empty config accepted")
	}
	for _, want := range []string{"Binary", "Dir", "Address", "CA", "Port", "Etcd.Endpoints"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestFirstServiceIP(t *testing.T) {
	for in, want := range map[string]string{"10.96.0.0/16": "10.96.0.1", "10.96.5.7/12": "10.96.0.1", "fd00::/108": "fd00::1", "bad": ""} {
		if got := firstServiceIP(in); got != want {
			t.Errorf("firstServiceIP(%s) = %q, want %q", in, got, want)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(mustRead(t, path))
	if b == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Two masters' apiservers share the lab's CA and port 6443: each must keep a
// certificate for its own address.
func TestTwoAPIServersOnOnePortKeepTheirOwnCertificates(t *testing.T) {
	a := testAPIServer(t)
	b := a
	a.Address, b.Address = "10.77.1.11", "10.77.2.12"
	b.Dir = filepath.Join(t.TempDir(), "b")
	fa, err := a.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := loadCert(t, fa.Serving.CertFile).VerifyHostname(a.Address); err != nil {
		t.Errorf("after the second apiserver's Prepare, the first's certificate: %v", err)
	}
	ca := a.CA
	sa := Component{Name: Scheduler, Binary: "/b", Dir: filepath.Join(t.TempDir(), "s1"), CA: ca, Server: "https://x", Address: a.Address, Port: 10259}
	sb := sa
	sb.Address, sb.Dir = b.Address, filepath.Join(t.TempDir(), "s2")
	fs, err := sa.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := loadCert(t, fs.Serving.CertFile).VerifyHostname(sa.Address); err != nil {
		t.Errorf("after the second scheduler's Prepare, the first's certificate: %v", err)
	}
}
