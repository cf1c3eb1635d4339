package pki_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

func loadCert(t *testing.T, p pki.Pair) *x509.Certificate {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	if err != nil {
		t.Fatalf("load %s: %v", p.CertFile, err)
	}
	return kp.Leaf
}

func TestServerCertificate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ca, err := pki.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Server("e1", "10.77.0.11", "e1.lab")
	if err != nil {
		t.Fatal(err)
	}
	cert := loadCert(t, p)
	if cert.Subject.CommonName != "e1" {
		t.Errorf("CN = %q, want e1", cert.Subject.CommonName)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", cert.PublicKey)
	}
	if life := cert.NotAfter.Sub(time.Now()); life < 24*time.Hour || life > 7*24*time.Hour {
		t.Errorf("certificate valid for another %v, want a few days", life)
	}
	for _, host := range []string{"127.0.0.1", "10.77.0.11", "e1.lab", "localhost"} {
		opts := x509.VerifyOptions{
			Roots:     ca.Pool(),
			DNSName:   host,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("verify as server %s: %v", host, err)
		}
	}
	if err := cert.VerifyHostname("10.77.0.12"); err == nil {
		t.Error("certificate also valid for 10.77.0.12, which was not asked for")
	}
	// etcd members present their server certificate to peers as clients.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify member certificate for client auth: %v", err)
	}
}

func TestKubeClientCertificateCarriesGroups(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.KubeClient("system:node:w1", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cert := loadCert(t, p)
	if cert.Subject.CommonName != "system:node:w1" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Errorf("subject %v, want CN system:node:w1 O system:nodes", cert.Subject)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify for client auth: %v", err)
	}
	if _, err := ca.KubeClient(""); err == nil {
		t.Error("KubeClient(\"\") issued a certificate without a user name")
	}
}

func TestClientCertificate(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Client("kha-supervisor")
	if err != nil {
		t.Fatal(err)
	}
	cert := loadCert(t, p)
	if cert.Subject.CommonName != "kha-supervisor" {
		t.Errorf("CN = %q, want the user name", cert.Subject.CommonName)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("verify for client auth: %v", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate also verifies as a server certificate")
	}
	if _, err := ca.Client(""); err == nil {
		t.Error("Client(\"\") issued a certificate without a user name")
	}
	if _, err := ca.Server("../escape"); err == nil {
		t.Error("Server accepted a name that leaves the directory")
	}
	other, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("certificate verifies against an unrelated CA")
	}
}

func TestFileModes(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("m1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("root")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{ca.KeyFile, srv.KeyFile, cli.KeyFile} {
		st, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", key, st.Mode().Perm())
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{"ca.crt", "ca.key", "client-root.crt", "client-root.key", "m1.crt", "m1.key"}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v (no temporaries left)", names, want)
	}
}

func TestLoadCAIssuesVerifiableCertificates(t *testing.T) {
	dir := t.TempDir()
	orig, err := pki.NewCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loaded.Server("e2", "10.77.0.12")
	if err != nil {
		t.Fatal(err)
	}
	cert := loadCert(t, p)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: orig.Pool(), DNSName: "10.77.0.12"}); err != nil {
		t.Errorf("certificate from the loaded CA does not verify against the original: %v", err)
	}
	if _, err := pki.LoadCA(t.TempDir()); err == nil {
		t.Error("LoadCA of an empty directory succeeded")
	}
}

// TestTLSHandshake checks the files work together in a real mutual-TLS
// handshake, the way etcd uses them.
func TestTLSHandshake(t *testing.T) {
	ca, err := pki.NewCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Server("e1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.Client("alice")
	if err != nil {
		t.Fatal(err)
	}
	srvPair, err := tls.LoadX509KeyPair(srv.CertFile, srv.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cliPair, err := tls.LoadX509KeyPair(cli.CertFile, cli.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{srvPair},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			peer <- "handshake: " + err.Error()
			return
		}
		peer <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", port), &tls.Config{
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{cliPair},
	})
	if err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	defer c.Close()
	if got := <-peer; got != "alice" {
		t.Fatalf("server saw client %q, want alice", got)
	}
}
