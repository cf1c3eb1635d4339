package dropin

import (
	"strings"
	"testing"
	"time"
)

// keys parses the systemd INI text into section -> key -> values, ignoring
// comments, so tests judge what systemd would read, not the prose.
func keys(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("line %d %q: not KEY=VALUE inside a section", i+1, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestRenderKeys(t *testing.T) {
	b, err := Render(Params{Unit: "kube-scheduler.service", StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.HasPrefix(text, Marker+" for kube-scheduler.service") {
		t.Errorf("first line %q does not start with the marker", strings.SplitN(text, "\n", 2)[0])
	}
	want := map[string]map[string]string{
		"Unit": {"BindsTo": "kha-supervisor.service", "After": "kha-supervisor.service"},
		"Service": {
			"ExecStartPre":    "+/usr/libexec/kha-supervisor/kha-guard %n",
			"EnvironmentFile": "-/run/kha-supervisor/fencing.env",
			"TimeoutStopSec":  "2s",
			"KillMode":        "control-group",
			"SendSIGKILL":     "yes",
		},
	}
	got := keys(t, text)
	for sec, kv := range want {
		for k, v := range kv {
			if vs := got[sec][k]; len(vs) != 1 || vs[0] != v {
				t.Errorf("[%s] %s = %q, want exactly %q", sec, k, vs, v)
			}
		}
		if len(got[sec]) != len(kv) {
			t.Errorf("[%s] has keys %v, want exactly %v", sec, got[sec], kv)
		}
	}
	if len(got) != len(want) {
		t.Errorf("sections %v, want %v", got, want)
	}
}

func TestRenderFollowsParams(t *testing.T) {
	b, err := Render(Params{Unit: "my-sched@a.service", Guard: "/opt/kha/bin/kha-guard", StopTimeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := keys(t, string(b))["Service"]
	if v := got["ExecStartPre"]; len(v) != 1 || v[0] != "+/opt/kha/bin/kha-guard %n" {
		t.Errorf("ExecStartPre = %q", v)
	}
	// --binary: the subcommand's form, as drop-ins before kha-guard had it.
	b, err = Render(Params{Unit: "my-sched@a.service", Binary: "/opt/kha/bin/kha-supervisor", StopTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if v := keys(t, string(b))["Service"]["ExecStartPre"]; len(v) != 1 || v[0] != "+/opt/kha/bin/kha-supervisor guard %n" {
		t.Errorf("with Binary: ExecStartPre = %q", v)
	}
	if v := got["TimeoutStopSec"]; len(v) != 1 || v[0] != "1500ms" {
		t.Errorf("TimeoutStopSec = %q, want 1500ms", v)
	}
}

func TestSeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Second, "2s"},
		{90 * time.Second, "90s"},
		{1500 * time.Millisecond, "1500ms"},
		{1999999 * time.Microsecond, "1999ms"}, // rounded down, never up
		{500 * time.Microsecond, "1ms"},        // never 0, which systemd reads as "no timeout"
	} {
		if got := Seconds(c.d); got != c.want {
			t.Errorf("Seconds(%s) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	ok := Params{Unit: "kube-scheduler.service", StopTimeout: time.Second}
	for name, mut := range map[string]func(*Params){
		"slash":                 func(p *Params) { p.Unit = "../../etc/passwd.service" },
		"not a service":         func(p *Params) { p.Unit = "kube-scheduler.socket" },
		"space":                 func(p *Params) { p.Unit = "kube scheduler.service" },
		"newline":               func(p *Params) { p.Unit = "a.service\nExecStart=/bin/sh" },
		"itself":                func(p *Params) { p.Unit = SupervisorUnit },
		"relative bin":          func(p *Params) { p.Binary = "kha-supervisor" },
		"bin with %":            func(p *Params) { p.Binary = "/usr/bin/kha%n" },
		"relative guard":        func(p *Params) { p.Guard = "kha-guard" },
		"guard with space":      func(p *Params) { p.Guard = "/opt/my kha/kha-guard" },
		"guard named otherwise": func(p *Params) { p.Guard = "/opt/kha/guard" },
		"bin named otherwise":   func(p *Params) { p.Binary = "/opt/kha/khasup" },
		"guard and bin": func(p *Params) {
			p.Guard, p.Binary = "/usr/libexec/kha-supervisor/kha-guard", "/usr/bin/kha-supervisor"
		},
		"zero stop": func(p *Params) { p.StopTimeout = 0 },
	} {
		p := ok
		mut(&p)
		if _, err := Render(p); err == nil {
			t.Errorf("%s: Render(%+v) succeeded, want a refusal", name, p)
		}
	}
	if _, err := Render(ok); err != nil {
		t.Errorf("valid params refused: %v", err)
	}
}

func TestPath(t *testing.T) {
	if got, want := Path("/etc/systemd/system", "kube-scheduler.service"), "/etc/systemd/system/kube-scheduler.service.d/50-kha-supervisor.conf"; got != want {
		t.Errorf("Path = %q, want %q", got, want)
	}
}
