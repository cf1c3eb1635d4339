package config

import (
	"strings"
	"testing"
	"time"
)

const schedProbe = `"kube-scheduler.service=https://127.0.0.1:10259/healthz"`

// TestHealthRefusals: each bad [health] value is refused with its key and
// line, naming the culprit.
func TestHealthRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, toml, key, msg string
	}{
		{"https without CA or insecure", "probes = [" + schedProbe + "]", "health.probes", "entry 1: an https probe needs health.ca"},
		{"no URL", `probes = ["kube-scheduler.service"]`, "health.probes", "UNIT=URL"},
		{"not a URL", `probes = ["kube-scheduler.service=127.0.0.1:10259"]`, "health.probes", "not an http:// or https://"},
		{"credentials in the URL", `probes = ["kube-scheduler.service=http://u:p@127.0.0.1:1/"]`, "health.probes", "not an http"},
		{"bad port", `probes = ["kube-scheduler.service=http://127.0.0.1:70000/"]`, "health.probes", "port must be 1-65535"},
		{"unmanaged unit", `probes = ["etcd.service=http://127.0.0.1:2381/health"]`, "health.probes", "etcd.service is not in units.managed"},
		{"two probes", "insecure = true\nprobes = [" + schedProbe + ", " + schedProbe + "]", "health.probes", "entry 2: kube-scheduler.service has two probes"},
		{"CA and insecure", "ca = \"/etc/kubernetes/pki/ca.crt\"\ninsecure = true", "health.insecure", "not both"},
		{"relative CA", `ca = "ca.crt"`, "health.ca", "absolute"},
		{"missing CA", `ca = "/nonexistent/ca.crt"`, "health.ca", "cannot read"},
		{"zero interval", `interval = "0s"`, "health.interval", "positive"},
		{"timeout over 10 intervals", "interval = \"100ms\"\ntimeout = \"1001ms\"", "health.timeout", "at most 10 x health.interval (100ms)"},
		{"negative grace", `grace = "-1s"`, "health.grace", "negative"},
		{"zero threshold", `failure_threshold = 0`, "health.failure_threshold", "at least 1"},
		{"a number for a duration", `interval = 2`, "health.interval", "wrong type"},
		{"unknown key", `url = "http://x/"`, "health.url", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeFile(t, dir, "config.toml", "node = \"m1\"\n[health]\n"+tc.toml+"\n", 0o600)
			_, err := Load(path)
			e := asError(t, err)
			if e.Key != tc.key || !strings.Contains(err.Error(), tc.msg) || e.Line < 3 {
				t.Errorf("got %v (key %q, line %d), want key %q, a line, and %q", err, e.Key, e.Line, tc.key, tc.msg)
			}
		})
	}
}

func TestHealthAccepts(t *testing.T) {
	dir := t.TempDir()
	ca := newPKI(t, dir).ca
	path := writeFile(t, dir, "config.toml", "node = \"m1\"\n[health]\nca = \""+ca+"\"\nprobes = ["+schedProbe+
		", \"kube-controller-manager.service=http://localhost/healthz\"]\ngrace = \"0s\"\n", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	probes, err := c.Health.ProbeList()
	if err != nil || len(probes) != 2 || probes[0].Unit != "kube-scheduler.service" || probes[1].URL != "http://localhost/healthz" {
		t.Fatalf("probes %+v, %v", probes, err)
	}
	if d := Default().Health; len(d.Probes) != 0 || d.Insecure || d.CA != "" {
		t.Errorf("the default probes something: %+v", d)
	}
}

// A timeout longer than the interval is accepted: the probes overlap.
func TestHealthTimeoutMayExceedTheInterval(t *testing.T) {
	path := writeFile(t, t.TempDir(), "config.toml", "node = \"m1\"\n[health]\ninterval = \"250ms\"\ntimeout = \"1250ms\"\n", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Health.Timeout != 1250*time.Millisecond || c.Health.Interval != 250*time.Millisecond {
		t.Fatalf("health %+v", c.Health)
	}
}
