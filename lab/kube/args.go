package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// Args are kube-apiserver's flags: TLS for clients and etcd, client
// certificates and service-account tokens for authentication, RBAC (and the
// Node authorizer the lab's node agents will need), audit logging to a file.
func (a APIServer) Args(f Files) []string {
	args := []string{
		"--bind-address=" + a.Address,
		"--advertise-address=" + a.Address,
		"--secure-port=" + strconv.Itoa(a.Port),
		"--tls-cert-file=" + f.Serving.CertFile,
		"--tls-private-key-file=" + f.Serving.KeyFile,
		"--cert-dir=" + a.Dir, // never the default /var/run/kubernetes
		"--client-ca-file=" + a.CA.CertFile,
		// Without a request-header CA the scheduler and controller-manager
		// log "unable to load configmap based request-header-client-ca-file"
		// forever (seen with v1.37); kubeadm sets these.
		"--requestheader-client-ca-file=" + a.CA.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f.ServiceKey,
		"--service-account-signing-key-file=" + f.ServiceAccount,
		"--service-cluster-ip-range=" + a.serviceCIDR(),
		"--etcd-servers=" + strings.Join(a.Etcd.Endpoints, ","),
		"--audit-policy-file=" + f.AuditPolicy,
		"--audit-log-path=" + f.AuditLog,
		"--audit-log-format=json",
		// The lab reads whole audit logs after a run: no rotation inside it.
		"--audit-log-maxsize=0",
		// Batching would delay events by up to a second and reorder nothing
		// the lab needs; blocking keeps each event's timestamp its own.
		"--audit-log-mode=blocking",
		"--profiling=false",
	}
	if ip, err := netip.ParseAddr(a.Address); err == nil && ip.IsLoopback() {
		// The "kubernetes" service's endpoints may not be a loopback address
		// (the apiserver exits: "cannot use public IP 127.0.0.1 with
		// endpoint reconciler"); nothing in a loopback test needs them.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if a.Etcd.Prefix != "" {
		args = append(args, "--etcd-prefix="+a.Etcd.Prefix)
	}
	if a.Etcd.CAFile != "" {
		args = append(args, "--etcd-cafile="+a.Etcd.CAFile)
	}
	if a.Etcd.CertFile != "" {
		args = append(args, "--etcd-certfile="+a.Etcd.CertFile, "--etcd-keyfile="+a.Etcd.KeyFile)
	}
	return args
}

// auditPolicy records every write at Metadata level (user, verb, object,
// response code, timestamps): what the lab judges overlap by. Reads and
// health probes are dropped, they would dwarf the writes. The managed
// components' creates, updates and patches (direct, as their service
// accounts, or through the API gate as kha-supervisor) are logged with
// their answers, managedFields left out: an accepted write's answer carries
// the resourceVersion etcd committed it at, which pairs it with its write in
// etcd's history exactly (lab/kube/commits), where object, verb and time
// leave several updates of one object ambiguous.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version", "/metrics"]
  - level: None
    verbs: ["get", "list", "watch"]
  - level: RequestResponse
    users: ["system:kube-scheduler", "system:kube-controller-manager", "kha-supervisor"]
    verbs: ["create", "update", "patch"]
    omitManagedFields: true
  - level: RequestResponse
    userGroups: ["system:serviceaccounts:kube-system"]
    verbs: ["create", "update", "patch"]
    omitManagedFields: true
  - level: Metadata
`

// firstServiceIP is the address of the "kubernetes" service: the first
// address after the range's network address.
func firstServiceIP(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ""
	}
	return p.Masked().Addr().Next().String()
}

// writeKeyPair writes an ECDSA P-256 key (signing service-account tokens,
// ES256) and its public key, unless the private key already exists.
func writeKeyPair(keyFile, pubFile string) error {
	if _, err := os.Stat(keyFile); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return err
	}
	tmp := keyFile + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, keyFile)
}

// certName names a serving certificate by address and port: two servers on
// one port (the apiservers of m1 and m2) must not share one file in a CA
// directory, or the second's certificate replaces the first's (seen: "x509:
// certificate is valid for ... 10.77.2.12, not 10.77.1.11").
func certName(addr string, port int) string {
	return strings.NewReplacer(":", "_", "/", "_").Replace(addr) + "-" + strconv.Itoa(port)
}
