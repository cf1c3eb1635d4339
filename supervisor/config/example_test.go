package config

import (
	"bufio"
	"os"
	"reflect"
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
	got.Node, got.Path = "", ""
	if want := Default(); !reflect.DeepEqual(got, want) {
		t.Errorf("example differs from Default():\n got %+v\nwant %+v", got, want)
	}
}

// Every key is written out in the example (a key it left out would still
// load as its default, so the comparison above cannot see it).
func TestExampleListsEveryKey(t *testing.T) {
	var m map[string]any
	md, err := toml.DecodeFile(examplePath, &m)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range schema.leaves() {
		if !md.IsDefined(strings.Split(n.key, ".")...) {
			t.Errorf("config.example.toml does not set %s", n.key)
		}
	}
}

// fastProfile extracts the documented "fast" profile from the example: the
// indented comment lines after its heading.
func fastProfile(t *testing.T) string {
	t.Helper()
	f, err := os.Open(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, `# The "fast" profile`):
			in = true
		case in && !strings.HasPrefix(line, "#"):
			return strings.Join(out, "\n") + "\n"
		case in && strings.HasPrefix(line, "#   "):
			out = append(out, strings.TrimPrefix(line, "#   "))
		}
	}
	t.Fatal(`config.example.toml has no "fast" profile block`)
	return ""
}

func TestFastProfile(t *testing.T) {
	text := fastProfile(t)
	path := writeFile(t, t.TempDir(), "fast.toml", text, 0o600)
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("the documented fast profile is refused: %v\n%s", err, text)
	}
	if cfg.Lease.TTL.D() != 4*time.Second || cfg.Lease.RenewInterval.D() != 500*time.Millisecond ||
		cfg.Units.StopTimeout.D() != time.Second || cfg.Units.KillGrace.D() != 500*time.Millisecond {
		t.Errorf("fast profile is not TTL 4s, renew 500ms, stop 1s + 500ms: %+v %+v", cfg.Lease, cfg.Units)
	}
	if span := cfg.Window().Span(cfg.Lease.TTL.D()); span != 1960*time.Millisecond {
		t.Errorf("fast fence window = %s, want 1.96s as documented", span)
	}
	// Raising the slack to 1.5s leaves 960ms, under two 500ms renewals: the
	// two-interval rule is applied to this profile too.
	cfg.Lease.Slack = D(1500 * time.Millisecond)
	if e := asError(t, cfg.Validate()); e.Key != "lease.ttl" || !strings.Contains(e.Msg, "fence window 960ms") {
		t.Errorf("fast profile with 1.5s slack: %v", e)
	}
}
