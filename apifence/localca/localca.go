// Package localca is the supervisor's own small CA for its loopback API
// gates: one CA per node, kept under the state directory, and one serving
// certificate per gate for 127.0.0.1, ::1 and localhost. The units' rewritten
// kubeconfigs trust this CA only, so nothing else can pose as the gate, and
// the gate's key never leaves the node.
package localca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// DefaultStateDir is where the supervisor keeps the CA unless
// api_fence.state_dir says otherwise (the unit's StateDirectory=).
const DefaultStateDir = layout.StateDir

const (
	caValidity      = 10 * 365 * 24 * time.Hour
	servingValidity = 90 * 24 * time.Hour
	// A serving certificate with less than this left is re-issued when the
	// gate starts: restarts are the rotation points.
	renewBefore = 30 * 24 * time.Hour
)

// CA is the loaded local CA.
type CA struct {
	Dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// CertFile is the CA certificate's file under dir: what the units'
// kubeconfigs and the webhook's caBundle trust.
func CertFile(dir string) string { return filepath.Join(dir, "gate-ca.crt") }

// Open loads the CA from dir/gate-ca.{crt,key}, creating it (and dir, 0700)
// when missing. A key file readable by group or others is refused: it would
// let a local user impersonate every gate on the node.
func Open(dir string) (*CA, error) {
	if dir == "" {
		return nil, errors.New("localca: empty state directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	crt, key := CertFile(dir), filepath.Join(dir, "gate-ca.key")
	if _, err := os.Stat(key); errors.Is(err, fs.ErrNotExist) {
		if err := create(crt, key); err != nil {
			return nil, err
		}
	}
	ca, err := load(crt, key)
	if err != nil {
		return nil, err
	}
	ca.Dir = dir
	return ca, nil
}

func create(crtFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("localca: %w", err)
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kha-supervisor gate CA " + host},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
	}
	der, err := sign(tmpl, tmpl, &key.PublicKey, key, caValidity)
	if err != nil {
		return err
	}
	if err := writePair(crtFile, keyFile, der, key); err != nil {
		return err
	}
	return nil
}

func load(crtFile, keyFile string) (*CA, error) {
	info, err := os.Stat(keyFile)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("localca: %s has mode %04o; it must not be readable by group or others (chmod 600)", keyFile, info.Mode().Perm())
	}
	pair, err := tls.LoadX509KeyPair(crtFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("localca: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("localca: %s is not an ECDSA key", keyFile)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("localca: %s: %w", crtFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("localca: %s is not a CA certificate", crtFile)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// PEM is the CA certificate, for a kubeconfig's certificate-authority-data.
func (ca *CA) PEM() []byte { return append([]byte(nil), ca.pem...) }

// Pool trusts this CA only.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Serving returns the serving certificate of the gate called name (a unit
// name), stored as dir/gate-<name>.{crt,key}: loaded when it was issued by
// this CA and has more than 30 days left, issued afresh otherwise.
func (ca *CA) Serving(name string) (tls.Certificate, error) {
	if name == "" || name != filepath.Base(name) {
		return tls.Certificate{}, fmt.Errorf("localca: %q is not a usable gate name", name)
	}
	crt := filepath.Join(ca.Dir, "gate-"+name+".crt")
	key := filepath.Join(ca.Dir, "gate-"+name+".key")
	if c, err := ca.loadServing(crt, key); err == nil {
		return c, nil
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("localca: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kha-supervisor gate " + name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	der, err := sign(tmpl, ca.cert, &k.PublicKey, ca.key, servingValidity)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writePair(crt, key, der, k); err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(crt, key)
}

func (ca *CA) loadServing(crtFile, keyFile string) (tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(crtFile, keyFile)
	if err != nil {
		return c, err
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return c, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return c, err
	}
	if time.Until(leaf.NotAfter) < renewBefore {
		return c, errors.New("expires soon")
	}
	return c, nil
}

func sign(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, key *ecdsa.PrivateKey, validity time.Duration) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("localca: serial: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, now.Add(-time.Hour), now.Add(validity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		return nil, fmt.Errorf("localca: sign: %w", err)
	}
	return der, nil
}

// writePair writes the key 0600 and the certificate 0644, each under a
// temporary name then renamed, so a reader never sees half a file.
func writePair(crtFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("localca: %w", err)
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(crtFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("localca: %w", err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // umask may have narrowed it; never widened
		return fmt.Errorf("localca: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("localca: %w", err)
	}
	return nil
}
