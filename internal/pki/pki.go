// Package pki writes a small certificate authority and the certificates an
// etcd cluster and its clients need, as PEM files. Tests and the lab use it;
// production deployments bring their own PKI.
//
// Keys are ECDSA P-256 and certificates are valid for a few days: long enough
// for any lab run, short enough that a leaked test key is worthless soon.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity is how long issued certificates are valid.
const Validity = 72 * time.Hour

// backdate tolerates small clock differences between the lab's namespaces and
// containers (they share the host clock, but a cert must never be "not yet
// valid" because it was issued in the same second it is checked).
const backdate = time.Hour

// CA is a certificate authority whose certificate and key live in Dir.
type CA struct {
	Dir      string // directory holding every file this CA writes
	CertFile string // Dir/ca.crt
	KeyFile  string // Dir/ca.key

	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// Pair names the PEM files of one issued certificate and its key.
type Pair struct {
	CertFile string
	KeyFile  string
}

// NewCA creates dir (mode 0700) if needed and writes a fresh CA into it as
// ca.crt and ca.key. An existing CA in dir is overwritten.
func NewCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kha-supervisor test CA", Organization: []string{"kha-supervisor"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	ca := &CA{
		Dir:      dir,
		CertFile: filepath.Join(dir, "ca.crt"),
		KeyFile:  filepath.Join(dir, "ca.key"),
		cert:     cert,
		key:      key,
	}
	if err := writePair(Pair{CertFile: ca.CertFile, KeyFile: ca.KeyFile}, der, key); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA reads the CA that NewCA wrote into dir, so that a later process
// (a lab step, a member started separately) can issue more certificates.
func LoadCA(dir string) (*CA, error) {
	ca := &CA{Dir: dir, CertFile: filepath.Join(dir, "ca.crt"), KeyFile: filepath.Join(dir, "ca.key")}
	certPEM, err := os.ReadFile(ca.CertFile)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificate: %w", err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s holds no PEM certificate", ca.CertFile)
	}
	if ca.cert, err = x509.ParseCertificate(block.Bytes); err != nil {
		return nil, fmt.Errorf("pki: parse %s: %w", ca.CertFile, err)
	}
	keyPEM, err := os.ReadFile(ca.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("pki: %s holds no PEM EC private key", ca.KeyFile)
	}
	if ca.key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
		return nil, fmt.Errorf("pki: parse %s: %w", ca.KeyFile, err)
	}
	return ca, nil
}

// Server issues a certificate for an etcd member (or any TLS server) named
// name, written as Dir/name.crt and Dir/name.key. hosts are IP addresses or DNS
// names for the SANs; 127.0.0.1 and localhost are always included so loopback
// clients can verify it. The certificate is valid for client authentication as
// well, because etcd members present their server certificate to peers.
func (ca *CA) Server(name string, hosts ...string) (Pair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: []string{"kha-supervisor"}},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(name, tmpl)
}

// Client issues a client certificate whose common name is user: with etcd's
// --client-cert-auth, a client presenting it acts as that etcd user unless it
// also logs in with a password. Written as Dir/<file>.crt and .key where file
// is user prefixed with "client-", so a user named like a member cannot
// overwrite the member's files.
func (ca *CA) Client(user string) (Pair, error) {
	if user == "" {
		return Pair{}, errors.New("pki: client certificate needs a user name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: []string{"kha-supervisor"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue("client-"+user, tmpl)
}

// KubeClient issues a client certificate for a Kubernetes API server: the
// apiserver takes the common name as the user and each organization as a
// group (system:masters for the lab's admin, system:nodes for a node).
// Written as Dir/client-<user>.crt and .key, like Client.
func (ca *CA) KubeClient(user string, groups ...string) (Pair, error) {
	if user == "" {
		return Pair{}, errors.New("pki: client certificate needs a user name")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	return ca.issue("client-"+user, tmpl)
}

// ClientPair is where Client and KubeClient write user's certificate and
// key, for a reader that must not issue them again.
func (ca *CA) ClientPair(user string) Pair { return ca.pair("client-" + user) }

func (ca *CA) pair(file string) Pair {
	return Pair{CertFile: filepath.Join(ca.Dir, file+".crt"), KeyFile: filepath.Join(ca.Dir, file+".key")}
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func (ca *CA) issue(file string, tmpl *x509.Certificate) (Pair, error) {
	if file == "" || file != filepath.Base(file) || file == "ca" {
		return Pair{}, fmt.Errorf("pki: %q is not a usable file name", file)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: generate key for %s: %w", file, err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return Pair{}, err
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(Validity)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("pki: sign certificate for %s: %w", file, err)
	}
	p := ca.pair(file)
	return p, writePair(p, der, key)
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return s, nil
}

// writePair writes the certificate world-readable (0644) and the key 0600.
// Each file is written under a temporary name and renamed, so a reader never
// sees half a PEM block and a re-issue replaces the mode as well.
func writePair(p Pair, der []byte, key *ecdsa.PrivateKey) error {
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: marshal key: %w", err)
	}
	if err := writeFile(p.CertFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeFile(p.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("pki: create %s: %w", tmp, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pki: write %s: %w", tmp, err)
	}
	// OpenFile applies the umask; the mode must hold regardless of it.
	if err := os.Chmod(tmp, mode); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pki: chmod %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pki: rename %s: %w", tmp, err)
	}
	return nil
}
