package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFile writes content with exactly mode (chmod after create, so the
// umask does not interfere) and returns the path.
func writeFile(t testing.TB, dir, name, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// asError asserts err is a *Error and returns it.
func asError(t testing.TB, err error) *Error {
	t.Helper()
	if err == nil {
		t.Fatal("want a refusal, got nil")
	}
	e, ok := errors.AsType[*Error](err)
	if !ok {
		t.Fatalf("error is %T, not *config.Error: %v", err, err)
	}
	return e
}

func hostname(t testing.TB) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return strings.ToLower(h)
}

// pki is a throw-away CA and a client certificate signed by it, as PEM files.
type pki struct {
	ca, cert, key string // paths
	otherKey      string // a key that does not belong to cert
}

func newPKI(t testing.TB, dir string) pki {
	t.Helper()
	caKey := genKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kt-config-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	clientKey := genKey(t)
	clientTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kt-config-client"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTmpl, caCert, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pki{
		ca:       writeFile(t, dir, "ca.crt", pemBlock("CERTIFICATE", caDER), 0o644),
		cert:     writeFile(t, dir, "client.crt", pemBlock("CERTIFICATE", clientDER), 0o644),
		key:      writeFile(t, dir, "client.key", keyPEM(t, clientKey), 0o600),
		otherKey: writeFile(t, dir, "other.key", keyPEM(t, genKey(t)), 0o600),
	}
}

func genKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyPEM(t testing.TB, k *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("PRIVATE KEY", der)
}

func pemBlock(typ string, der []byte) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}
