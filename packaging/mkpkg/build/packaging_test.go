package build

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

const testVersion = "0.0.0+7.g0123456789ab"

var testEpoch = time.Unix(1700000000, 0).UTC()

// built is one amd64 build of both packages, shared by the tests below
// (building takes most of their time).
type built struct {
	root, bin string
	deb, rpm  string
	debX      string // the deb extracted
	err       error
}

var (
	buildOnce sync.Once
	shared    built
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s: %v", root, err)
	}
	return root
}

func packages(t *testing.T) built {
	t.Helper()
	testenv.RequireCommands(t, "go", "git", "dpkg-deb", "rpm", "lintian", "systemd-analyze", "man", "bash")
	root := repoRoot(t)
	buildOnce.Do(func() {
		shared.err = func() error {
			dir, err := os.MkdirTemp("", "kha-pkg-test-")
			if err != nil {
				return err
			}
			shared.root = root
			shared.bin = filepath.Join(dir, "bin", Name)
			if err := BuildBinary(context.Background(), "go", root, "amd64", testVersion, shared.bin); err != nil {
				return err
			}
			arts, err := Build(context.Background(), Options{
				Root: root, OutDir: filepath.Join(dir, "out"), Version: testVersion, Epoch: testEpoch,
				Arches: []string{"amd64"}, Binaries: map[string]string{"amd64": shared.bin},
			})
			if err != nil {
				return err
			}
			for _, a := range arts {
				switch a.Format {
				case "deb":
					shared.deb = a.Path
				case "rpm":
					shared.rpm = a.Path
				}
			}
			shared.debX = filepath.Join(dir, "x")
			if out, err := exec.Command("dpkg-deb", "-x", shared.deb, shared.debX).CombinedOutput(); err != nil {
				return fmt.Errorf("dpkg-deb -x: %v: %s", err, out)
			}
			if out, err := exec.Command("dpkg-deb", "-e", shared.deb, filepath.Join(shared.debX, "DEBIAN")).CombinedOutput(); err != nil {
				return fmt.Errorf("dpkg-deb -e: %v: %s", err, out)
			}
			return nil
		}()
	})
	if shared.err != nil {
		t.Fatalf("building the packages: %v", shared.err)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.bin != "" {
		os.RemoveAll(filepath.Dir(filepath.Dir(shared.bin)))
	}
	os.Exit(code)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// entry is one file of a package listing.
type entry struct{ mode, owner string }

// The complete file list of both packages: anything missing or extra fails.
var wantFiles = map[string]entry{
	"/etc/kha-supervisor/":                                                              {"drwxr-xr-x", "root/root"},
	"/etc/kha-supervisor/config.toml":                                                   {"-rw-------", "root/root"},
	"/usr/bin/kha-supervisor":                                                           {"-rwxr-xr-x", "root/root"},
	"/usr/libexec/kha-supervisor/":                                                      {"drwxr-xr-x", "root/root"},
	"/usr/libexec/kha-supervisor/kha-guard":                                             {"-rwxr-xr-x", "root/root"},
	"/usr/lib/systemd/system/kha-supervisor.service":                                    {"-rw-r--r--", "root/root"},
	"/usr/lib/systemd/system/kube-controller-manager.service.d/":                        {"drwxr-xr-x", "root/root"},
	"/usr/lib/systemd/system/kube-controller-manager.service.d/50-kha-supervisor.conf":  {"-rw-r--r--", "root/root"},
	"/usr/lib/systemd/system/kube-scheduler.service.d/":                                 {"drwxr-xr-x", "root/root"},
	"/usr/lib/systemd/system/kube-scheduler.service.d/50-kha-supervisor.conf":           {"-rw-r--r--", "root/root"},
	"/usr/share/bash-completion/completions/kha-supervisor":                             {"-rw-r--r--", "root/root"},
	"/usr/share/fish/vendor_completions.d/kha-supervisor.fish":                          {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/":                                                    {"drwxr-xr-x", "root/root"},
	"/usr/share/doc/kha-supervisor/copyright":                                           {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/README.md":                                           {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/install.md":                                          {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/operations.md":                                       {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/troubleshooting.md":                                  {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/configuration.md":                                    {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/architecture.md":                                     {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/tour.md":                                             {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/failure-modes.md":                                    {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/operator-scenarios.md":                               {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/sidebyside.svg":                                      {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/failover-timeline.svg":                               {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/third-party-licenses.gz":                             {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/":                                           {"drwxr-xr-x", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/config.example.toml":                        {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kha-supervisor-alerts.yml":                  {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kha-supervisor-alerts_test.yml":             {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kha-supervisor-dashboard.json":              {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kubernetes/":                                {"drwxr-xr-x", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kubernetes/kube-scheduler.service":          {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kubernetes/kube-controller-manager.service": {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/examples/kubernetes/kha-supervisor-health.toml":      {"-rw-r--r--", "root/root"},
	"/usr/share/man/man5/kha-supervisor.toml.5.gz":                                      {"-rw-r--r--", "root/root"},
	"/usr/share/man/man8/kha-supervisor.8.gz":                                           {"-rw-r--r--", "root/root"},
}

// Only in the deb: the Debian changelog, the lintian overrides, and the
// parent directories dpkg lists.
var wantDebOnly = map[string]entry{
	"/usr/share/zsh/vendor-completions/_kha-supervisor": {"-rw-r--r--", "root/root"},
	"/usr/share/doc/kha-supervisor/changelog.gz":        {"-rw-r--r--", "root/root"},
	"/usr/share/lintian/overrides/kha-supervisor":       {"-rw-r--r--", "root/root"},
}

func TestDebContents(t *testing.T) {
	p := packages(t)
	got := map[string]entry{}
	stamp := testEpoch.Format("2006-01-02 15:04")
	for _, line := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", p.deb)), "\n") {
		// drwxr-xr-x root/root 0 2023-11-14 22:13 ./etc/
		f := strings.Fields(line)
		if len(f) != 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		if f[3]+" "+f[4] != stamp {
			t.Errorf("%s has mtime %s %s, want the source date %s", f[5], f[3], f[4], stamp)
		}
		got[strings.TrimPrefix(f[5], ".")] = entry{f[0], f[1]}
	}
	want := map[string]entry{}
	for k, v := range wantFiles {
		want[k] = v
	}
	for k, v := range wantDebOnly {
		want[k] = v
	}
	for k, v := range got {
		if w, ok := want[k]; ok && w != v {
			t.Errorf("%s: %v, want %v", k, v, w)
		}
		if _, ok := want[k]; !ok && !strings.HasSuffix(k, "/") {
			t.Errorf("unexpected file %s in the deb", k)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing from the deb", k)
		}
	}

	info := run(t, "dpkg-deb", "-f", p.deb, "Package", "Version", "Architecture", "Depends", "Section", "Maintainer")
	for _, w := range []string{"Package: kha-supervisor\n", "Version: " + testVersion + "\n", "Architecture: amd64\n",
		"Depends: systemd (>= 243)\n", "Section: admin\n", "Maintainer: " + Maintainer + "\n"} {
		if !strings.Contains(info, w) {
			t.Errorf("control fields lack %q:\n%s", w, info)
		}
	}
	conffiles, err := os.ReadFile(filepath.Join(p.debX, "DEBIAN", "conffiles"))
	if err != nil || strings.TrimSpace(string(conffiles)) != "/etc/kha-supervisor/config.toml" {
		t.Errorf("conffiles = %q (%v), want exactly the configuration", conffiles, err)
	}
	if out := run(t, "dpkg-deb", "-I", p.deb); !strings.Contains(out, "conffiles") || !strings.Contains(out, "postinst") {
		t.Errorf("dpkg-deb -I does not list conffiles and scripts:\n%s", out)
	}
}

// Only in the rpm: zsh's completion directory on that family.
var wantRpmOnly = map[string]entry{
	"/usr/share/zsh/site-functions/_kha-supervisor": {"-rw-r--r--", "root/root"},
}

func TestRpmContents(t *testing.T) {
	p := packages(t)
	got := map[string]string{}
	flags := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILEMTIMES} %{FILEFLAGS:fflags}| %{FILENAMES}\n]`, p.rpm)), "\n") {
		meta, name, ok := strings.Cut(line, "| ")
		f := strings.Fields(meta)
		if !ok || len(f) < 3 {
			t.Fatalf("rpm --qf line %q", line)
		}
		if f[2] != fmt.Sprint(testEpoch.Unix()) {
			t.Errorf("%s has mtime %s, want %d", name, f[2], testEpoch.Unix())
		}
		if f[0][0] == 'd' {
			name += "/"
		}
		got[name] = f[0] + " " + f[1]
		if len(f) > 3 {
			flags[name] = f[3]
		}
	}
	want := map[string]entry{}
	for k, v := range wantFiles {
		want[k] = v
	}
	for k, v := range wantRpmOnly {
		want[k] = v
	}
	if len(got) != len(want) {
		t.Errorf("rpm has %d files, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if got[k] != w.mode+" "+w.owner {
			t.Errorf("rpm %s: %q, want %q", k, got[k], w.mode+" "+w.owner)
		}
	}
	if flags["/etc/kha-supervisor/config.toml"] != "cn" {
		t.Errorf("config.toml flags %q, want cn (%%config(noreplace))", flags["/etc/kha-supervisor/config.toml"])
	}
	if flags["/usr/share/doc/kha-supervisor/copyright"] != "l" {
		t.Errorf("copyright flags %q, want l (%%license)", flags["/usr/share/doc/kha-supervisor/copyright"])
	}
	if out := strings.TrimSpace(run(t, "rpm", "-qp", "--configfiles", p.rpm)); out != "/etc/kha-supervisor/config.toml" {
		t.Errorf("rpm --configfiles = %q", out)
	}
	if out := run(t, "rpm", "-qp", "--requires", p.rpm); !strings.Contains(out, "systemd >= 243") {
		t.Errorf("rpm --requires lacks systemd >= 243:\n%s", out)
	}
	if out := strings.TrimSpace(run(t, "rpm", "-qp", "--qf", "%{NAME} %{VERSION} %{RELEASE} %{ARCH} %{BUILDHOST} %{BUILDTIME}", p.rpm)); out != fmt.Sprintf("kha-supervisor %s 1 x86_64 %s %d", testVersion, BuildHost, testEpoch.Unix()) {
		t.Errorf("rpm header: %q", out)
	}
	if out := run(t, "rpm", "-K", "--nosignature", p.rpm); !strings.Contains(out, "digests OK") {
		t.Errorf("rpm -K: %s", out)
	}
	scripts := run(t, "rpm", "-qp", "--scripts", p.rpm)
	for _, s := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet", "posttrans scriptlet"} {
		if !strings.Contains(scripts, s) {
			t.Errorf("rpm --scripts lacks the %s", s)
		}
	}
}

// TestReproducible builds everything again, binary included, and expects
// the very same bytes.
func TestReproducible(t *testing.T) {
	p := packages(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, Name)
	if err := BuildBinary(context.Background(), "go", p.root, "amd64", testVersion, bin); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{p.bin, bin}} {
		if a, b := sha(t, pair[0]), sha(t, pair[1]); a != b {
			t.Errorf("two builds of the binary differ: %s %s", a, b)
		}
	}
	arts, err := Build(context.Background(), Options{
		Root: p.root, OutDir: filepath.Join(dir, "out"), Version: testVersion, Epoch: testEpoch,
		Arches: []string{"amd64"}, Binaries: map[string]string{"amd64": bin},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arts {
		first := p.deb
		if a.Format == "rpm" {
			first = p.rpm
		}
		if filepath.Base(first) != filepath.Base(a.Path) {
			t.Errorf("file names differ: %s %s", first, a.Path)
		}
		if s := sha(t, first); s != a.SHA256 {
			t.Errorf("%s: two builds differ: %s %s", filepath.Base(a.Path), s, a.SHA256)
		}
	}

	// A different epoch must show: the timestamps really come from it.
	other, err := Build(context.Background(), Options{
		Root: p.root, OutDir: filepath.Join(dir, "other"), Version: testVersion, Epoch: testEpoch.Add(time.Hour),
		Arches: []string{"amd64"}, Formats: []string{"deb"}, Binaries: map[string]string{"amd64": bin},
	})
	if err != nil {
		t.Fatal(err)
	}
	if other[0].SHA256 == sha(t, p.deb) {
		t.Errorf("a build with another epoch is identical: the epoch is not used")
	}
}

func sha(t *testing.T, path string) string {
	t.Helper()
	s, err := SHA256File(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVersionStamped(t *testing.T) {
	p := packages(t)
	if out := strings.TrimSpace(run(t, filepath.Join(p.debX, "usr/bin/kha-supervisor"), "version")); out != testVersion {
		t.Errorf("kha-supervisor version = %q, want %q", out, testVersion)
	}
	for _, bin := range []string{"usr/bin/kha-supervisor", strings.TrimPrefix(layout.Guard, "/")} {
		out := run(t, "go", "version", "-m", filepath.Join(p.debX, bin))
		for _, w := range []string{"GOOS=linux", "GOARCH=amd64", "CGO_ENABLED=0", "-trimpath=true", "GOAMD64=v1"} {
			if !strings.Contains(out, w) {
				t.Errorf("%s build settings lack %s:\n%s", bin, w, out)
			}
		}
	}
}

func TestGitVersionAndEpoch(t *testing.T) {
	testenv.RequireCommands(t, "git")
	root := repoRoot(t)
	v, err := GitVersion(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckVersion(v); err != nil {
		t.Error(err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "")
	e, err := SourceDateEpoch(context.Background(), root)
	if err != nil || e.Before(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("SourceDateEpoch = %v, %v", e, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "1234567890")
	if e, err := SourceDateEpoch(context.Background(), root); err != nil || e.Unix() != 1234567890 {
		t.Errorf("SourceDateEpoch ignores $SOURCE_DATE_EPOCH: %v %v", e, err)
	}
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := SourceDateEpoch(context.Background(), root); err == nil {
		t.Errorf("SourceDateEpoch accepted a bad $SOURCE_DATE_EPOCH")
	}
}

func TestLintian(t *testing.T) {
	p := packages(t)
	cmd := exec.Command("lintian", "--pedantic", "--display-info", "--no-tag-display-limit", p.deb)
	out, _ := cmd.CombinedOutput() // lintian exits non-zero on errors; the lines say which
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
			t.Errorf("lintian: %s", line)
		}
	}
	if cmd.ProcessState == nil || t.Failed() {
		t.Logf("lintian output:\n%s", out)
	}
}

// unitKeys parses systemd INI text into section -> key -> values.
func unitKeys(t *testing.T, text string) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	section := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			if out[section] == nil {
				out[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("not KEY=VALUE: %q", line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func one(t *testing.T, keys map[string]map[string][]string, section, key string) string {
	t.Helper()
	v := keys[section][key]
	if len(v) != 1 {
		t.Fatalf("[%s] %s = %q, want exactly one value", section, key, v)
	}
	return v[0]
}

func seconds(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("duration %q: %v", s, err)
	}
	return d
}

func TestServiceUnit(t *testing.T) {
	p := packages(t)
	b, err := os.ReadFile(filepath.Join(p.debX, "usr/lib/systemd/system/kha-supervisor.service"))
	if err != nil {
		t.Fatal(err)
	}
	k := unitKeys(t, string(b))
	for key, want := range map[string]string{
		"Type":                 "notify",
		"NotifyAccess":         "main",
		"ExecStart":            "/usr/bin/kha-supervisor run -c " + config.DefaultPath,
		"Restart":              "always",
		"KillMode":             "mixed",
		"RuntimeDirectory":     "kha-supervisor",
		"RuntimeDirectoryMode": "0700",
		"ProtectSystem":        "strict",
		"NoNewPrivileges":      "yes",
	} {
		if got := one(t, k, "Service", key); got != want {
			t.Errorf("[Service] %s = %q, want %q", key, got, want)
		}
	}
	if got := one(t, k, "Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("WantedBy = %q", got)
	}
	// Settings that would cut the supervisor off from etcd.
	for _, key := range []string{"PrivateNetwork", "IPAddressDeny"} {
		if _, ok := k["Service"][key]; ok {
			t.Errorf("[Service] sets %s: it would cut the supervisor off from etcd", key)
		}
	}
	if af := one(t, k, "Service", "RestrictAddressFamilies"); !strings.Contains(af, "AF_UNIX") || !strings.Contains(af, "AF_INET") {
		t.Errorf("RestrictAddressFamilies = %q: D-Bus needs AF_UNIX, etcd AF_INET", af)
	}

	// The watchdog must kill a frozen supervisor at once (SIGKILL, no abort
	// phase), and with the default configuration the fence window that
	// includes WatchdogSec (fencing.Window) must leave room for renewals.
	c := config.Default()
	watchdog := seconds(t, one(t, k, "Service", "WatchdogSec"))
	if sig := one(t, k, "Service", "WatchdogSignal"); sig != "SIGKILL" {
		t.Errorf("WatchdogSignal = %q: must be SIGKILL, the fence window has no room for an abort phase", sig)
	}
	w := c.Window()
	w.Watchdog = watchdog
	if err := w.Validate(c.Lease.RenewInterval); err != nil {
		t.Errorf("the packaged WatchdogSec %s does not fit the default configuration: %v", watchdog, err)
	}
	// The loop pings every poll interval; the watchdog must tolerate one
	// late ping without firing.
	if watchdog < 2*c.Units.PollInterval {
		t.Errorf("WatchdogSec %s is under two poll intervals (%s)", watchdog, c.Units.PollInterval)
	}
	// A graceful stop: every unit stopped in turn, the demote hook, the release.
	stop := seconds(t, one(t, k, "Service", "TimeoutStopSec"))
	need := time.Duration(len(c.Units.Managed))*w.StopMax + c.Hooks.Timeout + c.Etcd.RequestTimeout
	if stop < need {
		t.Errorf("TimeoutStopSec %s does not cover a graceful stop (%s)", stop, need)
	}
	if one(t, k, "Unit", "StartLimitIntervalSec") != "0" {
		t.Errorf("StartLimitIntervalSec must be 0: systemd must never give up restarting the supervisor")
	}

	// systemd itself must accept the unit and the drop-ins without a single
	// complaint. Binary paths point into the extracted tree, since
	// systemd-analyze checks that they exist.
	dir := t.TempDir()
	bin := filepath.Join(p.debX, "usr/bin/kha-supervisor")
	guardBin := filepath.Join(p.debX, dropin.DefaultGuard)
	fix := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, []byte(layout.Binary), []byte(bin))
		return bytes.ReplaceAll(b, []byte(dropin.DefaultGuard), []byte(guardBin))
	}
	if err := os.WriteFile(filepath.Join(dir, "kha-supervisor.service"), fix(b), 0o644); err != nil {
		t.Fatal(err)
	}
	units := []string{filepath.Join(dir, "kha-supervisor.service")}
	for _, u := range c.Units.Managed {
		if err := os.WriteFile(filepath.Join(dir, u), []byte("[Unit]\nDescription=stand-in\n[Service]\nExecStart=/bin/sleep infinity\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d, err := os.ReadFile(filepath.Join(p.debX, dropin.Path("usr/lib/systemd/system", u)))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, u+".d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, u+".d", dropin.FileName), fix(d), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, filepath.Join(dir, u))
	}
	cmd := exec.Command("systemd-analyze", append([]string{"verify", "--man=no"}, units...)...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestDropinsMatchInstallDropins: the packaged drop-ins are byte for byte
// what the packaged binary's install-dropins writes for the packaged
// configuration.
func TestDropinsMatchInstallDropins(t *testing.T) {
	p := packages(t)
	dir := t.TempDir()
	cfg := filepath.Join(p.debX, "etc/kha-supervisor/config.toml")
	run(t, filepath.Join(p.debX, "usr/bin/kha-supervisor"), "install-dropins", "-c", cfg, "--dir", dir, "--no-reload")
	managed := config.Default().Units.Managed
	for _, u := range managed {
		packaged, err := os.ReadFile(filepath.Join(p.debX, dropin.Path("usr/lib/systemd/system", u)))
		if err != nil {
			t.Fatal(err)
		}
		written, err := os.ReadFile(dropin.Path(dir, u))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(packaged, written) {
			t.Errorf("%s: packaged drop-in differs from install-dropins:\n%s\n---\n%s", u, packaged, written)
		}
		k := unitKeys(t, string(packaged))
		if one(t, k, "Unit", "BindsTo") != dropin.SupervisorUnit || one(t, k, "Unit", "After") != dropin.SupervisorUnit {
			t.Errorf("%s: not bound to and ordered after %s", u, dropin.SupervisorUnit)
		}
		if got := one(t, k, "Service", "ExecStartPre"); got != "+"+dropin.DefaultGuard+" %n" {
			t.Errorf("%s: ExecStartPre = %q", u, got)
		}
		if got := seconds(t, one(t, k, "Service", "TimeoutStopSec")); got != config.Default().Units.StopTimeout {
			t.Errorf("%s: TimeoutStopSec %s, want units.stop_timeout %s", u, got, config.Default().Units.StopTimeout)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(managed)+1 { // and kha-supervisor.service.d, the profile's WatchdogSec
		t.Errorf("install-dropins wrote %d directories, want %d", len(entries), len(managed)+1)
	}
	// And the packaged configuration is the example, which loads.
	ex, err := os.ReadFile(filepath.Join(p.root, "config.example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(cfg); !bytes.Equal(got, ex) {
		t.Errorf("packaged config.toml is not config.example.toml")
	}
}

// commandsOf lists the commands `kha-supervisor --help` shows (cobra's
// groups: a heading with "Commands" ending in ":", then "  NAME  summary"
// lines),
// with the subcommands of those that have any ("drill handoff").
func commandsOf(t *testing.T, bin string) []string {
	t.Helper()
	cmds := helpCommands(t, bin)
	if len(cmds) == 0 {
		t.Fatalf("no commands in `%s --help`", bin)
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c)
		for _, s := range helpCommands(t, bin, c) {
			out = append(out, c+" "+s)
		}
	}
	return out
}

func helpCommands(t *testing.T, bin string, path ...string) []string {
	t.Helper()
	out, _ := exec.Command(bin, append(path, "--help")...).Output()
	var cmds []string
	on := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case !strings.HasPrefix(line, " ") && strings.Contains(line, "Commands") && strings.HasSuffix(line, ":"):
			on = true
		case on && line == "":
			on = false
		case on && strings.HasPrefix(line, "  "):
			cmds = append(cmds, strings.Fields(line)[0])
		}
	}
	return cmds
}

// gunzip checks that b is what `gzip -9n` would make (no name, no time,
// best compression) and returns its content.
func gunzip(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header carries name %q / time %v", path, zr.Name, zr.ModTime)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestManPages(t *testing.T) {
	p := packages(t)
	bin := filepath.Join(p.debX, "usr/bin/kha-supervisor")
	page8 := gunzip(t, filepath.Join(p.debX, "usr/share/man/man8/kha-supervisor.8.gz"))
	page5 := gunzip(t, filepath.Join(p.debX, "usr/share/man/man5/kha-supervisor.toml.5.gz"))
	for name, page := range map[string]string{"kha-supervisor.8": page8, "kha-supervisor.toml.5": page5} {
		if strings.Contains(page, "@VERSION@") || strings.Contains(page, "@DATE@") || !strings.Contains(page, testVersion) {
			t.Errorf("%s: placeholders not replaced by the version and date", name)
		}
		// man(1) must render it without a single warning.
		f := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(f, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", f)
		cmd.Env = append(os.Environ(), "MANWIDTH=80", "LC_ALL=C.UTF-8")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil || stderr.Len() > 0 {
			t.Errorf("man --warnings %s: %v\n%s", name, err, stderr.String())
		}
	}
	// Every command the binary has is documented, with its own entry.
	for _, c := range commandsOf(t, bin) {
		if !regexp.MustCompile(`(?m)^\.TP\n\.BI? ` + regexp.QuoteMeta(strings.ReplaceAll(c, "-", `\-`)) + `\b`).MatchString(page8) {
			t.Errorf("kha-supervisor.8 has no entry for the command %q (add a .TP/.B item under COMMANDS and to the SYNOPSIS)", c)
		}
	}
	// Every flag of every command is documented.
	for _, c := range commandsOf(t, bin) {
		for _, f := range flagsOf(t, bin, c) {
			if f == "c" {
				continue // the common option, under OPTIONS
			}
			esc := `\-\-` + strings.ReplaceAll(f, "-", `\-`)
			if !regexp.MustCompile(`(?m)^\.(B|BI|RB \[) ?` + regexp.QuoteMeta(esc) + `\b`).MatchString(page8) {
				t.Errorf("kha-supervisor.8 does not document %s --%s", c, f)
			}
		}
	}
	// Every configuration key is documented in the file-format page.
	for _, key := range tomlKeys(reflect.TypeOf(config.Config{}), "") {
		section, name := "", key
		if i := strings.LastIndex(key, "."); i >= 0 {
			section, name = key[:i], key[i+1:]
		}
		if section != "" && !strings.Contains(page5, ".SH ["+section+"]") {
			t.Errorf("kha-supervisor.toml.5 has no section [%s]", section)
		}
		if !regexp.MustCompile(`(?m)^\.BR (\S+ ", " )*` + regexp.QuoteMeta(strings.ReplaceAll(name, "-", `\-`)) + `\b`).MatchString(page5) {
			t.Errorf("kha-supervisor.toml.5 does not document %s", key)
		}
	}
}

// flagsOf lists the long flags `kha-supervisor CMD --help` prints under
// "Flags:" (not the global ones, documented under OPTIONS).
func flagsOf(t *testing.T, bin, cmd string) []string {
	t.Helper()
	out, _ := exec.Command(bin, append(strings.Fields(cmd), "--help")...).CombinedOutput()
	text, _, _ := strings.Cut(string(out), "Global Flags:")
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z-]+)`).FindAllStringSubmatch(text, -1) {
		if m[1] != "help" {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// tomlKeys lists the dotted TOML keys of a config struct type.
func tomlKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := strings.Split(f.Tag.Get("toml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type.Name() != "Duration" {
			keys = append(keys, tomlKeys(f.Type, prefix+tag+".")...)
			continue
		}
		keys = append(keys, prefix+tag)
	}
	sort.Strings(keys)
	return keys
}

func TestBashCompletion(t *testing.T) {
	p := packages(t)
	bin := filepath.Join(p.debX, "usr/bin/kha-supervisor")
	// cobra's script needs the bash-completion package's helpers, as does
	// every script in its completions directory.
	const helpers = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(helpers); err != nil {
		t.Fatalf("this test needs the bash-completion package (%v)", err)
	}
	complete := func(line string) []string {
		t.Helper()
		script := `source "$1"; source "$2"; read -ra COMP_WORDS <<<"$3"; [[ $3 == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMP_LINE=$3; COMP_POINT=${#COMP_LINE}; __start_kha-supervisor kha-supervisor; printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script, "bash", helpers,
			filepath.Join(p.debX, "usr/share/bash-completion/completions/kha-supervisor"), line)
		cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr // compopt complains outside a real completion; harmless
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("completing %q: %v\n%s%s", line, err, out, stderr.String())
		}
		return strings.Fields(string(out))
	}
	got := complete("kha-supervisor ")
	for _, c := range helpCommands(t, bin) {
		if !contains(got, c) {
			t.Errorf("completion of commands %v lacks %q", got, c)
		}
	}
	if got := complete("kha-supervisor install-d"); len(got) != 1 || got[0] != "install-dropins" {
		t.Errorf("completing install-d: %v", got)
	}
	if n := len(flagsOf(t, bin, "install-dropins")); n < 4 {
		t.Errorf("install-dropins -h lists %d flags; the flag parsing of this test is broken", n)
	}
	for _, c := range commandsOf(t, bin) {
		got := complete("kha-supervisor " + c + " -")
		for _, f := range flagsOf(t, bin, c) {
			if !contains(got, "-"+f) && !contains(got, "--"+f) {
				t.Errorf("completion of %s flags %v lacks %q", c, got, f)
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
