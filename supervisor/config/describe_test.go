package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func describe(t *testing.T, c Config) string {
	t.Helper()
	var b strings.Builder
	if err := c.Describe(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestDescribeWindow(t *testing.T) {
	c := Default()
	c.Node = "m1"
	out := describe(t, c)
	for _, want := range []string{
		"S_max    = units.stop_timeout + units.kill_grace = 2s + 1s = 3s",
		"X = 10s*(1-0.01) - 3s - 500ms",
		"= 9.9s - 3s - 500ms = 6.4s",
		"6.4s / 1s = 6 renew intervals fit (at least 2 required: ok)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Describe lacks %q:\n%s", want, out)
		}
	}

	c.Lease.TTL = 4 * time.Second
	c.Lease.RenewInterval = 500 * time.Millisecond
	c.Units.StopTimeout = time.Second
	c.Units.KillGrace = 500 * time.Millisecond
	out = describe(t, c)
	for _, want := range []string{"= 3.96s - 1.5s - 500ms = 1.96s", "1.96s / 500ms = 3 renew intervals fit"} {
		if !strings.Contains(out, want) {
			t.Errorf("fast profile: Describe lacks %q:\n%s", want, out)
		}
	}

	c.Lease.TTL = 3 * time.Second
	if out = describe(t, c); !strings.Contains(out, "REFUSED") {
		t.Errorf("a too-small window is not flagged:\n%s", out)
	}
}

// Describe says whether etcd orders the old term's writes: without
// [etcd_fence] a write forwarded by a member partitioned with the old
// leader can commit late (lab scenario 75), and the output says so.
func TestDescribeEtcdFence(t *testing.T) {
	c := Default()
	c.Node = "m1"
	if out := describe(t, c); !strings.Contains(out, "etcd_fence off: a write the old leader's kube-apiserver handed to an etcd member") {
		t.Errorf("fence at etcd off, Describe does not say what it leaves open:\n%s", out)
	}
	c.EtcdFence.Users = []string{"m1=kube-apiserver-m1", "m2=kube-apiserver-m2"}
	out := describe(t, c)
	if !strings.Contains(out, `etcd_fence on: each takeover revokes etcd role "kube-apiserver"`) || strings.Contains(out, "etcd_fence off") {
		t.Errorf("fence at etcd on, Describe does not say so:\n%s", out)
	}
}

// Describe prints every key, as TOML that loads back to the same
// configuration. Every field is set to a non-default value so that a key
// Describe forgot would come back as its default and differ.
func TestDescribeRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	c := Config{
		Node:    "m2.example.com",
		Cluster: "other-plane",
		Profile: "fast",
		Etcd: Etcd{
			Endpoints: []string{"https://10.0.0.1:2379", "http://[::1]:2379"}, Prefix: "/x/y",
			CA: p.ca, Cert: p.cert, Key: p.key, Username: "kha \"quoted\" \\ user",
			PasswordFile: writeFile(t, dir, "pw", "pw", 0o600),
			DialTimeout:  3 * time.Second, RequestTimeout: 900 * time.Millisecond,
		},
		Lease: Lease{TTL: 15 * time.Second, RenewInterval: 1500 * time.Millisecond, ClockRate: 0.02,
			Slack: 700 * time.Millisecond, TakeoverDelay: time.Second},
		Units: Units{Managed: []string{"b.service", "a@x.service"}, StartTimeout: 11 * time.Second,
			StopTimeout: 3 * time.Second, KillGrace: 2 * time.Second, PollInterval: 2 * time.Second,
			FailureThreshold: 4, FailureWindow: time.Hour, Cooldown: 0,
			Processes: []string{"/usr/bin/b"}, StrayPolicy: StrayReport},
		Guard:   Guard{Socket: "/run/x.sock"},
		Log:     Log{Level: "debug", Format: "json"},
		HTTP:    HTTP{Listen: "[::1]:9999"},
		Hooks:   Hooks{OnPromote: []string{"/bin/a", "tab\there", "é"}, OnDemote: []string{"/bin/b"}, OnFence: []string{"/bin/c", ""}, Timeout: time.Minute},
		History: History{Retain: 7},
		APIFence: APIFence{Mode: "off", Kubeconfig: "/k", APIServers: []string{"https://10.0.0.1:6443"}, StateDir: "/s", ClientCA: "/ca",
			Gates: []string{"b.service=127.0.0.1:1"}, ConfirmTimeout: time.Second},
		Health: Health{Probes: []string{"b.service=https://127.0.0.1:10259/healthz", "a@x.service=http://[::1]:8080/livez"},
			CA: p.ca, Interval: 3 * time.Second, Timeout: 2 * time.Second, FailureThreshold: 2, Grace: 7 * time.Second},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	out := describe(t, c)
	path := writeFile(t, dir, "described.toml", out, 0o600)
	got, err := Load(path)
	if err != nil {
		t.Fatalf("Describe output does not load: %v\n%s", err, out)
	}
	got.Path = ""
	if d := diff(got, c); d != "" || !reflect.DeepEqual(got, c) {
		t.Errorf("round trip changed %s\n%s", d, out)
	}
}

// diff names the first leaf key whose values differ.
func diff(a, b Config) string {
	for _, n := range schema.leaves() {
		if x, y := fieldText(a, n.key), fieldText(b, n.key); x != y {
			return n.key + ": " + x + " != " + y
		}
	}
	return ""
}
