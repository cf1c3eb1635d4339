package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func runCheckConfig(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(env{ctx: context.Background(), stdout: &out, stderr: &errb}, append([]string{"check-config"}, args...))
	return code, out.String(), errb.String()
}

func checkConfigFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckConfigAccepts(t *testing.T) {
	file := checkConfigFile(t, "node = \"m1\"\n[lease]\nttl = \"12s\"\n")
	code, out, errs := runCheckConfig(t, "-c", file)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errs)
	}
	for _, want := range []string{
		"from " + file,
		`node = "m1"`,
		"[lease]\nttl = \"12s\"",
		"managed = [\"kube-controller-manager.service\", \"kube-scheduler.service\"]",
		// 12s*(1-0.01) - 3s - 500ms = 8.38s
		"= 11.88s - 3s - 500ms = 8.38s",
		"8 renew intervals fit",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestCheckConfigExample(t *testing.T) {
	if code, _, errs := runCheckConfig(t, "-c", "../../config.example.toml"); code != exitOK {
		t.Fatalf("config.example.toml: exit %d: %s", code, errs)
	}
}

func TestCheckConfigRefuses(t *testing.T) {
	file := checkConfigFile(t, "[lease]\nttl = \"4s\"\n")
	code, out, errs := runCheckConfig(t, "-c", file)
	if code != exitConfig {
		t.Fatalf("exit %d, want %d", code, exitConfig)
	}
	if out != "" {
		t.Errorf("a refused file printed a configuration:\n%s", out)
	}
	want := "kha-supervisor: " + file + `:2: lease.ttl = "4s": fence window 460ms is under two renew intervals`
	if !strings.HasPrefix(errs, want) || strings.Count(errs, "\n") != 1 {
		t.Errorf("stderr = %q\nwant one line starting %q", errs, want)
	}
}

func TestCheckConfigUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"unknown flag", []string{"-x"}, exitConfig, "unknown shorthand flag: 'x' in -x"},
		{"unknown long flag", []string{"--confg", "/dev/null"}, exitConfig, "unknown flag: --confg; did you mean --config?"},
		{"missing flag value", []string{"-c"}, exitConfig, "flag needs an argument"},
		{"stray argument", []string{"-c", "/dev/null", "extra"}, exitConfig, `unexpected argument "extra"`},
		{"missing file", []string{"-c", "/nonexistent/kt-config.toml"}, exitConfig, "/nonexistent/kt-config.toml: cannot read"},
		{"help", []string{"-h"}, exitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCheckConfig(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.err) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.err)
			}
			if tc.name == "help" && !strings.Contains(out, "Usage:\n  kha-supervisor check-config [flags]") {
				t.Errorf("check-config -h printed %q", out)
			}
		})
	}
}

// TestCheckConfigProductOnly: what check-config prints and what
// docs/configuration.md says name the product's own documents and keys
// only: no "brief" sections, no key that does not exist (issue 9, item 14).
func TestCheckConfigProductOnly(t *testing.T) {
	word := regexp.MustCompile(`(?i)\bbrief\b`)
	code, out, errs := runCheckConfig(t, "-c", "../../config.example.toml")
	if code != exitOK || word.MatchString(out+errs) {
		t.Errorf("check-config: exit %d, mentions a brief:\n%s%s", code, out, errs)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if m := word.FindAllIndex(doc, -1); len(m) > 0 {
		t.Errorf("docs/configuration.md mentions a brief %d times", len(m))
	}
	// There is no watchdog key (systemd's WatchdogSec is read from the
	// environment), so it is no step of the validation order either.
	if strings.Contains(string(doc), "history,\nwatchdog,") || strings.Contains(string(doc), "history, watchdog,") {
		t.Errorf("docs/configuration.md lists a watchdog key among the checks")
	}
}

// An https probe with neither a CA nor insecure is refused like every
// configuration error: exit 2, one line naming file, line and key.
func TestCheckConfigRefusesHTTPSProbeWithoutTrust(t *testing.T) {
	p := checkConfigFile(t, "node = \"m1\"\n[health]\nprobes = [\"kube-scheduler.service=https://127.0.0.1:10259/healthz\"]\n")
	code, _, stderr := runCheckConfig(t, "-c", p)
	if code != exitConfig || !strings.Contains(stderr, p+":3: health.probes") || !strings.Contains(stderr, "health.ca") {
		t.Fatalf("exit %d, stderr %q: want %d naming %s:3: health.probes", code, stderr, exitConfig, p)
	}
}

// Token mode without api_fence.apiservers: exit 2, the key named.
func TestCheckConfigRefusesTokenModeWithoutTheApiservers(t *testing.T) {
	file := checkConfigFile(t, "node = \"m1\"\n[api_fence]\nmode = \"token\"\n")
	code, _, errs := runCheckConfig(t, "-c", file)
	if code != exitConfig || !strings.Contains(errs, "api_fence.apiservers") {
		t.Fatalf("exit %d, stderr %q; want %d naming api_fence.apiservers", code, errs, exitConfig)
	}
}
