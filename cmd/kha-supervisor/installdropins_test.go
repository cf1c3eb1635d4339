package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// fakeReload replaces reloadSystemd for one test and counts the calls.
func fakeReload(t *testing.T) *int {
	t.Helper()
	n := new(int)
	old := reloadSystemd
	reloadSystemd = func(context.Context) error { *n++; return nil }
	t.Cleanup(func() { reloadSystemd = old })
	return n
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = dispatch(env{ctx: context.Background(), stdout: &o, stderr: &e}, args)
	return code, o.String(), e.String()
}

// tree reads every regular file under dir, keyed by its path relative to dir.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallDropinsWritesOnePerManagedUnit(t *testing.T) {
	reloads := fakeReload(t)
	cfg := writeConfig(t, `node = "m1"
[units]
managed = ["etcd-witness.service", "my-sched.service"]
stop_timeout = "1500ms"
`)
	dir := t.TempDir()
	code, out, errOut := runCmd(t, "install-dropins", "-c", cfg, "--dir", dir)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	got := tree(t, dir)
	if len(got) != 3 {
		t.Fatalf("files %v, want one drop-in per managed unit and the supervisor's", got)
	}
	for _, u := range []string{"etcd-witness.service", "my-sched.service"} {
		want, err := dropin.Render(dropin.Params{Unit: u, StopTimeout: 1500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rel := u + ".d/" + dropin.FileName
		if got[rel] != string(want) {
			t.Errorf("%s:\n%s\nwant:\n%s", rel, got[rel], want)
		}
		if !strings.Contains(got[rel], "TimeoutStopSec=1500ms\n") {
			t.Errorf("%s does not derive TimeoutStopSec from units.stop_timeout", rel)
		}
		if !strings.Contains(out, "wrote "+filepath.Join(dir, rel)) {
			t.Errorf("stdout %q does not report writing %s", out, rel)
		}
		st, err := os.Stat(filepath.Join(dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o644 {
			t.Errorf("%s mode %v, want 0644", rel, st.Mode().Perm())
		}
	}
	if *reloads != 1 {
		t.Errorf("daemon-reload ran %d times, want 1", *reloads)
	}
	sup := "kha-supervisor.service.d/" + dropin.FileName
	if !strings.Contains(got[sup], "\nWatchdogSec=2s\n") || !strings.HasSuffix(got[sup], "\nTimeoutStartSec=39s\n") || !strings.Contains(out, "wrote "+filepath.Join(dir, sup)) {
		t.Errorf("%s (default profile) lacks WatchdogSec=2s and the TimeoutStartSec the defaults need, or was not reported:\n%s", sup, got[sup])
	}

	// A second run changes nothing and so does not reload.
	code, out, _ = runCmd(t, "install-dropins", "-c", cfg, "--dir", dir)
	if code != exitOK || !strings.Contains(out, "unchanged ") || *reloads != 1 {
		t.Errorf("second run: exit %d, reloads %d, stdout %q; want unchanged files and no reload", code, *reloads, out)
	}
}

// The supervisor unit's drop-in carries the profile's WatchdogSec, and
// follows a change of profile.
func TestInstallDropinsWritesSupervisorWatchdog(t *testing.T) {
	fakeReload(t)
	dir := t.TempDir()
	sup := dropin.SupervisorPath(dir)
	for _, tc := range []struct{ profile, want string }{
		{"fast", "WatchdogSec=750ms\n"},
		{"default", "WatchdogSec=2s\n"},
	} {
		cfg := writeConfig(t, "node = \"m1\"\nprofile = \""+tc.profile+"\"\n")
		code, out, e := runCmd(t, "install-dropins", "-c", cfg, "--dir", dir)
		if code != exitOK {
			t.Fatalf("profile %s: exit %d: %s", tc.profile, code, e)
		}
		if !strings.Contains(out, "restart kha-supervisor.service for its new settings") {
			t.Errorf("profile %s: the changed supervisor drop-in does not ask for a restart:\n%s", tc.profile, out)
		}
		b, err := os.ReadFile(sup)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "\n"+tc.want) || !strings.Contains(string(b), "\nTimeoutStartSec=") || !strings.Contains(string(b), "profile ("+tc.profile+")") {
			t.Errorf("profile %s: %s:\n%s", tc.profile, sup, b)
		}
	}
	// A file of the administrator's at that path is not overwritten.
	if err := os.WriteFile(sup, []byte("[Service]\nWatchdogSec=5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "node = \"m1\"\n")
	if code, _, e := runCmd(t, "install-dropins", "-c", cfg, "--dir", dir); code != exitConfig || !strings.Contains(e, "not written by kha-supervisor") {
		t.Errorf("exit %d stderr %q: want a refusal to overwrite %s", code, e, sup)
	}
}

func TestInstallDropinsDryRunChangesNothing(t *testing.T) {
	reloads := fakeReload(t)
	cfg := writeConfig(t, "node = \"m1\"\n")
	dir := t.TempDir()
	code, out, errOut := runCmd(t, "install-dropins", "-c", cfg, "--dir", dir, "--dry-run")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if got := tree(t, dir); len(got) != 0 {
		t.Errorf("dry run wrote %v", got)
	}
	if *reloads != 0 {
		t.Errorf("dry run reloaded systemd")
	}
	for _, u := range config.Default().Units.Managed {
		text, err := dropin.Render(dropin.Params{Unit: u, StopTimeout: config.Default().Units.StopTimeout})
		if err != nil {
			t.Fatal(err)
		}
		want := "# would write " + dropin.Path(dir, u) + "\n" + string(text)
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks the path and text for %s:\n%s", u, out)
		}
	}
}

func TestInstallDropinsRemovesOnlyItsOwnStaleFiles(t *testing.T) {
	reloads := fakeReload(t)
	dir := t.TempDir()
	old := writeConfig(t, "node = \"m1\"\n[units]\nmanaged = [\"a.service\", \"b.service\"]\n")
	if code, _, e := runCmd(t, "install-dropins", "-c", old, "--dir", dir); code != exitOK {
		t.Fatalf("first run: %s", e)
	}
	// An administrator's own file with our name, for an unmanaged unit.
	mine := dropin.Path(dir, "c.service")
	if err := os.MkdirAll(filepath.Dir(mine), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine, []byte("[Unit]\nDescription=mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cur := writeConfig(t, "node = \"m1\"\n[units]\nmanaged = [\"b.service\"]\n")
	code, out, e := runCmd(t, "install-dropins", "-c", cur, "--dir", dir, "--dry-run")
	if code != exitOK || !strings.Contains(out, "# would remove "+dropin.Path(dir, "a.service")) {
		t.Fatalf("dry run: exit %d stdout %q stderr %q; want a.service's drop-in listed for removal", code, out, e)
	}
	if _, err := os.Stat(dropin.Path(dir, "a.service")); err != nil {
		t.Fatalf("dry run removed a file: %v", err)
	}

	code, out, e = runCmd(t, "install-dropins", "-c", cur, "--dir", dir)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, e)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.service.d")); !os.IsNotExist(err) {
		t.Errorf("stale drop-in (and its empty directory) not removed: %v; stdout %q", err, out)
	}
	if b, err := os.ReadFile(mine); err != nil || string(b) != "[Unit]\nDescription=mine\n" {
		t.Errorf("the administrator's file was touched: %q %v", b, err)
	}
	if *reloads != 2 {
		t.Errorf("reloads = %d, want 2 (each run changed something)", *reloads)
	}

	// A foreign file where a drop-in must go is refused, not overwritten.
	foreign := writeConfig(t, "node = \"m1\"\n[units]\nmanaged = [\"c.service\"]\n")
	code, _, e = runCmd(t, "install-dropins", "-c", foreign, "--dir", dir)
	if code == exitOK || !strings.Contains(e, "not written by kha-supervisor") {
		t.Errorf("exit %d stderr %q: want a refusal to overwrite %s", code, e, mine)
	}
	if b, _ := os.ReadFile(mine); string(b) != "[Unit]\nDescription=mine\n" {
		t.Errorf("the administrator's file was overwritten: %q", b)
	}
}

func TestInstallDropinsNoReload(t *testing.T) {
	reloads := fakeReload(t)
	cfg := writeConfig(t, "node = \"m1\"\n")
	code, out, e := runCmd(t, "install-dropins", "-c", cfg, "--dir", t.TempDir(), "--no-reload")
	if code != exitOK || *reloads != 0 || !strings.Contains(out, "daemon-reload") {
		t.Errorf("exit %d reloads %d stdout %q stderr %q: want files written, no reload, and a hint", code, *reloads, out, e)
	}
}

func TestInstallDropinsRefusals(t *testing.T) {
	fakeReload(t)
	good := writeConfig(t, "node = \"m1\"\n")
	for name, args := range map[string][]string{
		"missing config":   {"-c", filepath.Join(t.TempDir(), "nope.toml")},
		"relative dir":     {"-c", good, "--dir", "etc/systemd/system"},
		"relative binary":  {"-c", good, "--dir", t.TempDir(), "--binary", "kha-supervisor"},
		"relative guard":   {"-c", good, "--dir", t.TempDir(), "--guard", "kha-guard"},
		"guard and binary": {"-c", good, "--dir", t.TempDir(), "--guard", "/usr/libexec/kha-supervisor/kha-guard", "--binary", "/usr/bin/kha-supervisor"},
		"extra argument":   {"-c", good, "extra"},
		"unknown flag":     {"-c", good, "--frobnicate"},
		"bad config value": {"-c", writeConfig(t, "node = \"m1\"\n[units]\nmanaged = [\"x.socket\"]\n")},
	} {
		code, _, e := runCmd(t, append([]string{"install-dropins"}, args...)...)
		if code != exitConfig {
			t.Errorf("%s: exit %d (stderr %q), want %d", name, code, e, exitConfig)
		}
	}
}

// The drop-ins run kha-guard by default, another kha-guard with --guard, and
// the old `kha-supervisor guard` form with --binary.
func TestInstallDropinsGuardProgram(t *testing.T) {
	fakeReload(t)
	cfg := writeConfig(t, "node = \"m1\"\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "ExecStartPre=+/usr/libexec/kha-supervisor/kha-guard %n\n"},
		{[]string{"--guard", "/opt/kha/kha-guard"}, "ExecStartPre=+/opt/kha/kha-guard %n\n"},
		{[]string{"--binary", "/opt/kha/kha-supervisor"}, "ExecStartPre=+/opt/kha/kha-supervisor guard %n\n"},
	} {
		dir := t.TempDir()
		code, _, e := runCmd(t, append([]string{"install-dropins", "-c", cfg, "--dir", dir, "--no-reload"}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("install-dropins %q: exit %d, stderr %q", tc.args, code, e)
		}
		b, err := os.ReadFile(dropin.Path(dir, "kube-scheduler.service"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), tc.want) {
			t.Errorf("install-dropins %q wrote no %q:\n%s", tc.args, tc.want, b)
		}
	}
}
