package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
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
		if c.Node != "m2" || c.Cluster != Cluster || c.Lease.TTL != p.TTL || c.Lease.RenewInterval != p.Renew ||
			c.Units.StopTimeout != p.StopTimeout || c.Units.KillGrace != p.KillGrace || c.Units.PollInterval != p.Poll {
			t.Fatalf("profile %s: loaded %+v", p.Name, c)
		}
		if !slices.Equal(c.Etcd.Endpoints, l.Etcd.Endpoints()) || len(c.Etcd.Endpoints) != 3 || c.Etcd.Cert != filepath.Join(dir, "pki", "m2.crt") {
			t.Fatalf("profile %s: etcd %+v", p.Name, c.Etcd)
		}
		if err := c.Window().Validate(c.Lease.RenewInterval); err != nil {
			t.Fatalf("profile %s: fence window: %v", p.Name, err)
		}
	}
}

// legacyConfigText is the configuration the lab wrote before it built a
// config.Config (a TOML format string with the profile's numbers), kept
// here only to prove the new file says the same.
func legacyConfigText(l *Lab, node string) []byte {
	p := l.cfg.Profile
	q := func(s []string) string {
		for i := range s {
			s[i] = fmt.Sprintf("%q", s[i])
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	var units []string
	for _, w := range Witnesses {
		units = append(units, w.Service())
	}
	return fmt.Appendf(nil, `node = %[2]q
cluster = %[3]q

[etcd]
endpoints = %[4]s
prefix = %[14]q
ca = "/lab/pki/ca.crt"
cert = "/lab/pki/%[2]s.crt"
key = "/lab/pki/%[2]s.key"
request_timeout = %[5]q

[lease]
ttl = %[6]q
renew_interval = %[7]q
slack = %[8]q

[units]
managed = %[9]s
stop_timeout = %[10]q
kill_grace = %[11]q
poll_interval = %[12]q
cooldown = %[13]q

[log]
level = "debug"
`, p.Name, node, Cluster, q(l.Etcd.Endpoints()), p.RequestTimeout, p.TTL, p.Renew, p.Slack,
		q(units), p.StopTimeout, p.KillGrace, p.Poll, p.Cooldown, EtcdPrefix)
}

// The configuration built as a config.Config and printed by Describe
// decodes to what the old format string decoded to. The one difference is
// on purpose: the new file names its profile (profile = "fast"), where the
// old one left it to the default and set every timing key; the timings are
// the same, and install-dropins now writes the profile's WatchdogSec (the
// lab's own 90-lab-watchdog.conf sets the same value after it), and the
// health probes' interval and timeout, which are the profile's now.
func TestSupervisorConfigMatchesLegacy(t *testing.T) {
	for _, p := range []Profile{Fast, Default} {
		l, err := New(Config{Prefix: "khcfgtest", StateDir: t.TempDir(), Binary: "/bin/true", Profile: p})
		if err != nil {
			t.Fatal(err)
		}
		decode := func(name string, text []byte) config.Config {
			c := config.Default()
			if _, err := toml.Decode(string(text), &c); err != nil {
				t.Fatalf("profile %s: %s text does not decode: %v\n%s", p.Name, name, err, text)
			}
			return c
		}
		old := decode("legacy", legacyConfigText(l, "m1"))
		cur := decode("Describe", l.SupervisorConfigFor("m1"))
		if old.Profile != config.DefaultProfile || cur.Profile != p.Name {
			t.Errorf("profile %s: profile keys %q (legacy) and %q (new)", p.Name, old.Profile, cur.Profile)
		}
		old.Profile = cur.Profile
		// The second difference on purpose: the profile now times the
		// health probes too (a hung component found and restarted in
		// place within its profile's time, issue 21 item 4).
		prof := config.Profiles[p.Name]
		old.Health.Interval, old.Health.Timeout = prof.HealthInterval, prof.HealthTimeout
		// Compared as Describe prints them: every key, a nil list and an
		// empty one alike (the old file left lists out, the new one says []).
		if a, b := string(ConfigText(old)), string(ConfigText(cur)); a != b {
			t.Errorf("profile %s: the configurations differ:\nlegacy:\n%s\nnew:\n%s", p.Name, a, b)
		}
	}
}

// An unknown profile name is refused when the lab is set up, naming it.
func TestLabRefusesUnknownProfile(t *testing.T) {
	p := Fast
	p.Name = "turbo"
	_, err := New(Config{Prefix: "khcfgtest", StateDir: t.TempDir(), Binary: "/bin/true", Profile: p})
	if err == nil || !strings.Contains(err.Error(), `"turbo"`) {
		t.Fatalf("New with profile turbo: %v; want a refusal naming it", err)
	}
}
