package localca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenCreatesKeys0600AndServingVerifies(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ca, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gate-ca.key"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v, want 0600", f, err, info.Mode().Perm())
		}
	}
	c, err := ca.Serving("kube-scheduler.service")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(filepath.Join(dir, "gate-kube-scheduler.service.key")); info.Mode().Perm() != 0o600 {
		t.Errorf("serving key mode %v, want 0600", info.Mode().Perm())
	}
	leaf, _ := x509.ParseCertificate(c.Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("serving certificate does not verify for 127.0.0.1: %v", err)
	}
	// Reopened: same CA, same serving certificate (not re-issued).
	ca2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := ca2.Serving("kube-scheduler.service")
	if err != nil {
		t.Fatal(err)
	}
	if string(ca2.PEM()) != string(ca.PEM()) || string(c2.Certificate[0]) != string(c.Certificate[0]) {
		t.Error("reopening the state directory issued a new CA or serving certificate")
	}
}

func TestOpenRefusesExposedKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "gate-ca.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "gate-ca.key") || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("Open with a 0644 key: %v, want a refusal naming the file and mode", err)
	}
}

func TestServingRefusesPathNames(t *testing.T) {
	ca, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Serving("../x"); err == nil {
		t.Error("a gate name with a path was accepted")
	}
}
