package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// The configuration the lab writes into each master is one the real loader
// accepts, with the profile's timings and every etcd member.
func TestSupervisorConfigLoads(t *testing.T) {
	for _, p := range []Profile{Fast, Default} {
		l, err := New(Config{Prefix: "khcfgtest", StateDir: t.TempDir(), Binary: "/bin/true", Profile: p})
		if err != nil {
			t.Fatal(err)
		}
		// The TLS files live under /lab/pki inside a master; the loader
		// reads them, so point it at real ones in the same layout.
		dir := t.TempDir()
		ca, err := pki.NewCA(filepath.Join(dir, "pki"))
		if err != nil {
			t.Fatal(err)
		}
		pair, err := ca.Client("m2")
		if err != nil {
			t.Fatal(err)
		}
		for src, dst := range map[string]string{pair.CertFile: "m2.crt", pair.KeyFile: "m2.key"} {
			if err := os.Rename(src, filepath.Join(dir, "pki", dst)); err != nil {
				t.Fatal(err)
			}
		}
		text := strings.ReplaceAll(string(l.SupervisorConfigFor("m2")), "/lab/pki/", filepath.Join(dir, "pki")+"/")
		path := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("profile %s: the real loader refuses the lab's configuration: %v", p.Name, err)
		}
		if c.Node != "m2" || c.Cluster != Cluster || c.Lease.TTL.D() != p.TTL || c.Lease.RenewInterval.D() != p.Renew ||
			c.Units.StopTimeout.D() != p.StopTimeout || c.Units.KillGrace.D() != p.KillGrace || c.Units.PollInterval.D() != p.Poll {
			t.Fatalf("profile %s: loaded %+v", p.Name, c)
		}
		if !slices.Equal(c.Etcd.Endpoints, l.Etcd.Endpoints()) || len(c.Etcd.Endpoints) != 3 || c.Etcd.Cert != filepath.Join(dir, "pki", "m2.crt") {
			t.Fatalf("profile %s: etcd %+v", p.Name, c.Etcd)
		}
		if err := c.Window().Validate(c.Lease.RenewInterval.D()); err != nil {
			t.Fatalf("profile %s: fence window: %v", p.Name, err)
		}
	}
}
