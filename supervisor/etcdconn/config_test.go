package etcdconn_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClientConfig(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Client("kha")
	if err != nil {
		t.Fatal(err)
	}
	e := config.Default().Etcd
	e.Endpoints = []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}
	e.CA, e.Cert, e.Key = ca.CertFile, cert.CertFile, cert.KeyFile
	e.Username = "kha"
	e.PasswordFile = writeFile(t, "pw with spaces \n")
	e.DialTimeout = 3 * time.Second

	cc, err := etcdconn.ClientConfig(e)
	if err != nil {
		t.Fatal(err)
	}
	if cc.Password != "pw with spaces " {
		t.Errorf("password %q: want the file's content without the trailing newline only", cc.Password)
	}
	if cc.Username != "kha" || cc.DialTimeout != 3*time.Second || len(cc.Endpoints) != 2 {
		t.Errorf("config %+v does not carry username, dial timeout and endpoints", cc)
	}
	if cc.TLS == nil || len(cc.TLS.Certificates) == 0 && cc.TLS.GetClientCertificate == nil || cc.TLS.RootCAs == nil {
		t.Errorf("TLS config lacks the client certificate or the CA: %+v", cc.TLS)
	}
	if cc.AutoSyncInterval != 0 || cc.DialKeepAliveTime <= 0 || cc.DialKeepAliveTimeout <= 0 || cc.Logger == nil {
		t.Errorf("config %+v: want auto-sync off, keepalive on, a logger", cc)
	}
}

func TestClientConfigRefuses(t *testing.T) {
	base := config.Default().Etcd
	base.Endpoints = []string{"http://127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		edit func(*config.Etcd)
		want string
	}{
		{"no endpoints", func(e *config.Etcd) { e.Endpoints = nil }, "no endpoints"},
		{"cert without key", func(e *config.Etcd) { e.Cert = "/etc/x.crt" }, "cert and key"},
		{"missing CA file", func(e *config.Etcd) { e.CA = "/nonexistent/ca.crt" }, "/nonexistent/ca.crt"},
		{"username without password", func(e *config.Etcd) { e.Username = "kha" }, "password_file is not"},
		{"password without username", func(e *config.Etcd) { e.PasswordFile = writeFile(t, "pw") }, "username is not"},
		{"empty password", func(e *config.Etcd) { e.Username, e.PasswordFile = "kha", writeFile(t, "\n") }, "is empty"},
		{"missing password file", func(e *config.Etcd) { e.Username, e.PasswordFile = "kha", "/nonexistent/pw" }, "/nonexistent/pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			tc.edit(&e)
			_, err := etcdconn.ClientConfig(e)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ClientConfig: %v; want an error mentioning %q", err, tc.want)
			}
		})
	}
}
