package config

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

const examplePath = "../../config.example.toml"

// The shipped example loads, and equals Default() except for the node name,
// which defaults to the host name.
func TestExampleIsDefault(t *testing.T) {
	got, err := Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if want := hostname(t); got.Node != want {
		t.Errorf("node = %q, want the host name %q", got.Node, want)
	}
	// The profile's keys are commented out in the example, so that
	// changing the profile there changes them.
	if !reflect.DeepEqual(got.FromProfile, ProfileKeys()) {
		t.Errorf("keys from the profile = %v, want all of %v", got.FromProfile, ProfileKeys())
	}
	got.Node, got.Path, got.FromProfile = "", "", nil
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("example differs from Default():\n got %+v\nwant %+v", got, want)
	}
}

// Every key is written out in the example (a key it left out would still
// load as its default, so the comparison above cannot see it), the
// profile's keys as comments showing the default profile's value.
func TestExampleListsEveryKey(t *testing.T) {
	var m map[string]any
	md, err := toml.DecodeFile(examplePath, &m)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	for _, n := range schema.leaves() {
		defined := md.IsDefined(strings.Split(n.key, ".")...)
		if !slices.Contains(ProfileKeys(), n.key) {
			if !defined {
				t.Errorf("config.example.toml does not set %s", n.key)
			}
			continue
		}
		comment := "\n# " + n.name + " = " + fieldText(def, n.key) + "  (profile)\n"
		if defined || !strings.Contains(string(raw), comment) {
			t.Errorf("config.example.toml must leave %s to the profile, as the comment %q", n.key, strings.TrimSpace(comment))
		}
	}
}

// `profile = "fast"` alone gives the fast profile's values, with its window.
func TestFastProfile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "fast.toml", "profile = \"fast\"\n", 0o600)
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("the fast profile is refused: %v", err)
	}
	p := Profiles["fast"]
	if cfg.Lease.TTL != p.TTL || cfg.Lease.RenewInterval != p.RenewInterval || cfg.Etcd.RequestTimeout != p.RequestTimeout ||
		cfg.Units.StopTimeout != p.StopTimeout || cfg.Units.KillGrace != p.KillGrace || cfg.Units.PollInterval != p.PollInterval {
		t.Errorf("fast profile not applied: %+v %+v %+v", cfg.Etcd, cfg.Lease, cfg.Units)
	}
	// Raising the slack until the window is under two renewals is refused:
	// the two-interval rule is applied to this profile too.
	span := cfg.Window().Span(cfg.Lease.TTL)
	cfg.Lease.Slack = cfg.Lease.Slack + span - 2*p.RenewInterval + time.Millisecond
	if e := asError(t, cfg.Validate()); e.Key != "lease.ttl" || !strings.Contains(e.Msg, "under two renew intervals") {
		t.Errorf("fast profile with a large slack: %v", e)
	}
}
