package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The case: profile "fast" with ttl = "4s" leaves a 1.46 s window
// under the profile's WatchdogSec=750ms, shorter than the 3.1 s a stock etcd
// leader election can leave without a renewal: refused, naming every key
// of the relation with its line or origin.
func TestCheckConfigRefusesWindowUnderEtcdElection(t *testing.T) {
	file := checkConfigFile(t, "node = \"m1\"\nprofile = \"fast\"\n[lease]\nttl = \"4s\"\n")
	code, out, errs := runCheckConfig(t, "-c", file)
	if code != exitConfig || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %d and nothing on stdout", code, out, errs, exitConfig)
	}
	for _, want := range []string{
		"kha-supervisor: " + file + `:4: lease.ttl = "4s": fence window 1.46s under the profile's WatchdogSec=750ms does not outlast the 3.1s`,
		"raise lease.ttl to at least 6s", "lease.accept_short_window = true",
		`lease.ttl = "4s" (line 4)`, `lease.renew_interval = "500ms" (from profile "fast")`, `profile = "fast" (line 2)`,
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Count(errs, "\n") != 1 {
		t.Errorf("refusal is not one line: %q", errs)
	}
}

// lease.accept_short_window = true runs it, with a warning on stderr and
// in the output, and the header follows the overridden TTL.
func TestCheckConfigAcceptsShortWindowWithWarning(t *testing.T) {
	file := checkConfigFile(t, "node = \"m1\"\nprofile = \"fast\"\n[lease]\nttl = \"4s\"\naccept_short_window = true\n")
	code, out, errs := runCheckConfig(t, "-c", file)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := "kha-supervisor check-config: warning: lease.accept_short_window = true: the fence window 1.46s"; !strings.Contains(errs, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errs)
	}
	for _, want := range []string{
		`# profile "fast": takeover about 4s after a failure; rides out 1.46s without a renewal`,
		"an etcd leader election can leave 3.1s without a renewal (SHORTER",
		"(the profile alone: takeover about 6 s",
		"# WARNING: lease.accept_short_window = true",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "takeover about 6s after") {
		t.Errorf("header still gives the profile's takeover:\n%s", out)
	}
}

// A relation refused because of a key other than the one blamed names the
// key the file changed, with its line.
func TestCheckConfigRelationNamesTheChangedKey(t *testing.T) {
	file := checkConfigFile(t, "node = \"m1\"\n[units]\nstop_timeout = \"8s\"\n")
	code, _, errs := runCheckConfig(t, "-c", file)
	if code != exitConfig || !strings.Contains(errs, `units.stop_timeout = "8s" (line 3)`) {
		t.Errorf("exit %d stderr %q; want %d naming units.stop_timeout and its line 3", code, errs, exitConfig)
	}
}

// Mistyped keys get the nearest key, not the whole list; "warning" is
// taken for "warn"; a client certificate over http:// is warned about.
func TestCheckConfigSmallThings(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"node = \"m1\"\n[lease]\nslak = \"1s\"\n", `:3: lease.slak = "1s": unknown key in [lease]; did you mean "slack"?`},
		{"node = \"m1\"\n[unit]\nmanaged = [\"a.service\"]\n", `:2: unit: unknown key at the top level; did you mean "units"?`},
	} {
		file := checkConfigFile(t, tc.file)
		code, _, errs := runCheckConfig(t, "-c", file)
		if code != exitConfig || errs != "kha-supervisor: "+file+tc.want+"\n" {
			t.Errorf("exit %d stderr %q; want %d and %q", code, errs, exitConfig, file+tc.want)
		}
	}
	file := checkConfigFile(t, "node = \"m1\"\n[log]\nlevel = \"warning\"\n")
	if code, out, errs := runCheckConfig(t, "-c", file); code != exitOK || !strings.Contains(out, "level = \"warn\"") {
		t.Errorf("log.level = \"warning\": exit %d stderr %q", code, errs)
	}
}

// KHA_CONFIG names the file for check-config as for status; -c wins.
func TestCheckConfigReadsKHAConfig(t *testing.T) {
	file := checkConfigFile(t, "node = \"from-env\"\n")
	var out, errb bytes.Buffer
	getenv := func(k string) string {
		if k == "KHA_CONFIG" {
			return file
		}
		return ""
	}
	code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: getenv}, []string{"check-config"})
	if code != exitOK || !strings.Contains(out.String(), `node = "from-env"`) {
		t.Fatalf("KHA_CONFIG=%s check-config: exit %d stderr %q", file, code, errb.String())
	}
	other := checkConfigFile(t, "node = \"from-flag\"\n")
	out.Reset()
	code = dispatch(env{ctx: context.Background(), stdout: &out, stderr: &errb, getenv: getenv}, []string{"check-config", "-c", other})
	if code != exitOK || !strings.Contains(out.String(), `node = "from-flag"`) {
		t.Fatalf("-c over KHA_CONFIG: exit %d stderr %q", code, errb.String())
	}
}
