package config

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Default() is the default profile: one definition of those values.
func TestDefaultIsTheDefaultProfile(t *testing.T) {
	want := Default()
	got := Default()
	if err := got.UseProfile(DefaultProfile); err != nil {
		t.Fatal(err)
	}
	got.FromProfile = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Default() differs from the default profile: %s", diff(got, want))
	}
}

// A profile sets every key it owns unless the file sets that key itself.
func TestProfileResolution(t *testing.T) {
	fast, def := Profiles["fast"], Profiles["default"]
	for _, tc := range []struct {
		name     string
		toml     string
		profile  string
		want     map[string]time.Duration // effective values of profile keys
		explicit []string                 // keys that must not be marked as from the profile
	}{
		{name: "no profile key", toml: "", profile: "default",
			want: map[string]time.Duration{"lease.ttl": def.TTL, "lease.renew_interval": def.RenewInterval, "units.poll_interval": def.PollInterval}},
		{name: "default by name", toml: "profile = \"default\"\n", profile: "default",
			want: map[string]time.Duration{"etcd.request_timeout": def.RequestTimeout, "units.stop_timeout": def.StopTimeout}},
		{name: "fast", toml: "profile = \"fast\"\n", profile: "fast",
			want: map[string]time.Duration{
				"etcd.request_timeout": fast.RequestTimeout, "lease.ttl": fast.TTL, "lease.renew_interval": fast.RenewInterval,
				"units.stop_timeout": fast.StopTimeout, "units.kill_grace": fast.KillGrace, "units.poll_interval": fast.PollInterval,
				"health.interval": fast.HealthInterval, "health.timeout": fast.HealthTimeout,
			}},
		{name: "fast with an explicit ttl", toml: "profile = \"fast\"\n[lease]\nttl = \"9s\"\n", profile: "fast",
			want:     map[string]time.Duration{"lease.ttl": 9 * time.Second, "lease.renew_interval": fast.RenewInterval, "units.kill_grace": fast.KillGrace},
			explicit: []string{"lease.ttl"}},
		{name: "explicit keys in several tables", toml: "profile = \"fast\"\n[etcd]\nrequest_timeout = \"300ms\"\n[units]\npoll_interval = \"2s\"\n", profile: "fast",
			want:     map[string]time.Duration{"etcd.request_timeout": 300 * time.Millisecond, "units.poll_interval": 2 * time.Second, "lease.ttl": fast.TTL},
			explicit: []string{"etcd.request_timeout", "units.poll_interval"}},
		{name: "default with an explicit key equal to the profile's", toml: "[lease]\nrenew_interval = \"1s\"\n", profile: "default",
			want: map[string]time.Duration{"lease.renew_interval": def.RenewInterval}, explicit: []string{"lease.renew_interval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(writeFile(t, t.TempDir(), "c.toml", tc.toml, 0o600))
			if err != nil {
				t.Fatal(err)
			}
			if c.Profile != tc.profile {
				t.Errorf("profile = %q, want %q", c.Profile, tc.profile)
			}
			for key, want := range tc.want {
				if got := duration(c, key); got != want {
					t.Errorf("%s = %s, want %s", key, got, want)
				}
			}
			for _, key := range ProfileKeys() {
				if got, want := c.FromProfileKey(key), !slices.Contains(tc.explicit, key); got != want {
					t.Errorf("%s from profile = %v, want %v", key, got, want)
				}
			}
		})
	}
}

func TestUnknownProfileRefused(t *testing.T) {
	for _, tc := range []struct {
		name, toml, value string
		line              int
		msg               string
	}{
		{"unknown name", "node = \"m1\"\nprofile = \"fastest\"\n", `"fastest"`, 2, `unknown profile; valid profiles: "default", "fast"`},
		{"empty name", "\n\nprofile = \"\"\n", `""`, 3, "unknown profile"},
		{"wrong case", "profile = \"Fast\"\n", `"Fast"`, 1, "unknown profile"},
		{"not a string", "profile = 1\n", "1", 1, "want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "c.toml", tc.toml, 0o600)
			_, err := Load(path)
			e := asError(t, err)
			if e.File != path || e.Key != "profile" || e.Line != tc.line || e.Value != tc.value || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %+v; want %s:%d profile = %s: ...%s", e, path, tc.line, tc.value, tc.msg)
			}
			if want := path + ":" + itoa(tc.line) + ": profile = " + tc.value + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("message %q does not start with %q", err, want)
			}
		})
	}
	// Built in code: Validate refuses it too.
	c := Default()
	c.Node, c.Profile = "m1", "turbo"
	if e := asError(t, c.Validate()); e.Key != "profile" || e.Value != `"turbo"` {
		t.Errorf("Validate: %v", e)
	}
	if err := c.UseProfile("turbo"); err == nil {
		t.Error("UseProfile accepted an unknown profile")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Describe says which values came from the profile and which profile.
func TestDescribeMarksProfileValues(t *testing.T) {
	c, err := Load(writeFile(t, t.TempDir(), "c.toml", "node = \"m1\"\nprofile = \"fast\"\n[lease]\nttl = \"9s\"\n", 0o600))
	if err != nil {
		t.Fatal(err)
	}
	out := describe(t, c)
	for _, want := range []string{
		`profile = "fast"`,
		`# profile "fast": `,
		"needs from etcd: ",
		`renew_interval = "500ms" # from profile "fast"`,
		"ttl = \"9s\"\n",
		`request_timeout = "500ms" # from profile "fast"`,
		`under systemd WatchdogSec=750ms (profile "fast")`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Describe lacks %q:\n%s", want, out)
		}
	}
}
