package build

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// scriptRig runs a maintainer script taken from a built package with
// systemctl and deb-systemd-invoke replaced by recorders, and with /etc and
// /run moved under a temporary root, so the scripts' decisions can be
// observed without touching this machine.
type scriptRig struct {
	t       *testing.T
	root    string // stands in for /
	bin     string // recorders
	log     string
	systemd bool // whether /run/systemd/system exists (systemd is PID 1)
}

func newRig(t *testing.T, systemd bool) *scriptRig {
	r := &scriptRig{t: t, root: t.TempDir(), systemd: systemd}
	r.bin = filepath.Join(r.root, "fakebin")
	r.log = filepath.Join(r.root, "calls.log")
	for _, d := range []string{r.bin, filepath.Join(r.root, "etc/kha-supervisor"), filepath.Join(r.root, "etc/systemd/system")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if systemd {
		if err := os.MkdirAll(filepath.Join(r.root, "run/systemd/system"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"systemctl", "deb-systemd-invoke", "deb-systemd-helper", "service", "invoke-rc.d"} {
		rec := "#!/bin/sh\necho \"" + name + " $*\" >>'" + r.log + "'\n"
		if err := os.WriteFile(filepath.Join(r.bin, name), []byte(rec), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// run executes script with args and returns the recorded calls and stdout.
func (r *scriptRig) run(name, script string, args ...string) (calls []string, stdout string) {
	r.t.Helper()
	os.Remove(r.log)
	text := strings.NewReplacer("/etc/", r.root+"/etc/", "/run/", r.root+"/run/").Replace(script)
	path := filepath.Join(r.root, name)
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command("sh", append([]string{"-e", path}, args...)...)
	cmd.Env = append(os.Environ(), "PATH="+r.bin+":/usr/bin:/bin")
	out, err := cmd.Output()
	if err != nil {
		r.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	if b, err := os.ReadFile(r.log); err == nil {
		calls = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return calls, string(out)
}

// debScripts and rpmScripts read the scripts out of the built packages.
func debScripts(t *testing.T, p built) map[string]string {
	t.Helper()
	s := map[string]string{}
	for _, n := range []string{"postinst", "prerm", "postrm"} {
		b, err := os.ReadFile(filepath.Join(p.debX, "DEBIAN", n))
		if err != nil {
			t.Fatal(err)
		}
		s[n] = string(b)
	}
	for _, n := range []string{"preinst", "config", "triggers"} {
		if _, err := os.Stat(filepath.Join(p.debX, "DEBIAN", n)); err == nil {
			t.Errorf("unexpected deb control file %s", n)
		}
	}
	return s
}

func rpmScripts(t *testing.T, p built) map[string]string {
	t.Helper()
	s := map[string]string{}
	for _, tag := range []string{"PREIN", "POSTIN", "PREUN", "POSTUN", "PRETRANS", "POSTTRANS"} {
		s[tag] = run(t, "rpm", "-qp", "--qf", "%{"+tag+"}", p.rpm)
	}
	for _, tag := range []string{"PREIN", "PRETRANS"} {
		if s[tag] != "(none)" {
			t.Errorf("unexpected rpm %s scriptlet: %q", tag, s[tag])
		}
	}
	return s
}

const reload = "systemctl --system daemon-reload"

func TestDebScripts(t *testing.T) {
	p := packages(t)
	s := debScripts(t, p)
	r := newRig(t, true)
	expect := func(name string, args []string, want []string) string {
		t.Helper()
		calls, out := r.run(name, s[name], args...)
		if !reflect.DeepEqual(calls, want) {
			t.Errorf("%s %v: calls %q, want %q", name, args, calls, want)
		}
		return out
	}

	// Fresh install: reload, say how to configure and start, start nothing.
	out := expect("postinst", []string{"configure", ""}, []string{reload})
	for _, w := range []string{"neither enabled nor started", "/etc/kha-supervisor/config.toml", "check-config", "install-dropins", "systemctl enable --now kha-supervisor"} {
		if !strings.Contains(out, w) {
			t.Errorf("install message lacks %q:\n%s", w, out)
		}
	}
	// Upgrade: restart only a running supervisor (try-restart), after the reload.
	if out := expect("postinst", []string{"configure", "0.0.0+1.g000000000000"}, []string{reload, "deb-systemd-invoke try-restart kha-supervisor.service"}); out != "" {
		t.Errorf("upgrade prints %q", out)
	}
	expect("postinst", []string{"abort-upgrade", "0.0.0+9.g000000000000"}, []string{reload})
	// prerm: stop on removal only; an upgrade keeps it running until postinst.
	expect("prerm", []string{"remove"}, []string{"deb-systemd-invoke stop kha-supervisor.service"})
	expect("prerm", []string{"upgrade", "0.0.0+9.g000000000000"}, nil)
	expect("postrm", []string{"upgrade", "0.0.0+9.g000000000000"}, nil)

	// Removal keeps the configuration; purge deletes it, and the drop-ins
	// install-dropins wrote (by their marker), never an administrator's.
	cfg := filepath.Join(r.root, "etc/kha-supervisor/config.toml")
	ours := filepath.Join(r.root, "etc/systemd/system/a.service.d/50-kha-supervisor.conf")
	theirs := filepath.Join(r.root, "etc/systemd/system/b.service.d/50-kha-supervisor.conf")
	link := filepath.Join(r.root, "etc/systemd/system/multi-user.target.wants/kha-supervisor.service")
	for path, text := range map[string]string{cfg: "node = \"m1\"\n", ours: "# Generated by kha-supervisor for a.service; do not edit.\n", theirs: "[Unit]\n"} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/lib/systemd/system/kha-supervisor.service", link); err != nil {
		t.Fatal(err)
	}
	expect("postrm", []string{"remove"}, []string{reload})
	if _, err := os.Stat(cfg); err != nil {
		t.Errorf("remove deleted the configuration: %v", err)
	}
	expect("postrm", []string{"purge"}, []string{reload})
	for _, gone := range []string{filepath.Dir(cfg), filepath.Dir(ours), link} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("purge left %s (%v)", gone, err)
		}
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("purge deleted a drop-in it did not write: %v", err)
	}

	// Without systemd as PID 1 (chroot, image build): no systemctl at all.
	nr := newRig(t, false)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"postinst", []string{"configure", ""}}, {"postinst", []string{"configure", "0.0.0+1.g000000000000"}},
		{"prerm", []string{"remove"}}, {"postrm", []string{"remove"}}, {"postrm", []string{"purge"}},
	} {
		if calls, _ := nr.run(c.name, s[c.name], c.args...); len(calls) != 0 {
			t.Errorf("without systemd, %s %v called %q", c.name, c.args, calls)
		}
	}
}

func TestRpmScripts(t *testing.T) {
	p := packages(t)
	s := rpmScripts(t, p)
	r := newRig(t, true)
	expect := func(tag string, args []string, want []string) string {
		t.Helper()
		calls, out := r.run(tag, s[tag], args...)
		if !reflect.DeepEqual(calls, want) {
			t.Errorf("%%%s %v: calls %q, want %q", strings.ToLower(tag), args, calls, want)
		}
		return out
	}
	const rpmReload = "systemctl daemon-reload"
	if out := expect("POSTIN", []string{"1"}, []string{rpmReload}); !strings.Contains(out, "neither enabled nor started") {
		t.Errorf("install message missing: %q", out)
	}
	if out := expect("POSTIN", []string{"2"}, []string{rpmReload}); out != "" {
		t.Errorf("upgrade prints %q", out)
	}
	expect("PREUN", []string{"1"}, nil)
	expect("PREUN", []string{"0"}, []string{"systemctl stop kha-supervisor.service"})
	expect("POSTUN", []string{"1"}, []string{rpmReload})
	expect("POSTUN", []string{"0"}, []string{rpmReload})
	expect("POSTTRANS", []string{"0"}, []string{rpmReload, "systemctl try-restart kha-supervisor.service"})

	nr := newRig(t, false)
	for _, c := range [][]string{{"POSTIN", "1"}, {"POSTIN", "2"}, {"PREUN", "0"}, {"POSTUN", "0"}, {"POSTTRANS", "0"}} {
		if calls, _ := nr.run(c[0], s[c[0]], c[1:]...); len(calls) != 0 {
			t.Errorf("without systemd, %%%s %v called %q", strings.ToLower(c[0]), c[1:], calls)
		}
	}
}

// TestScriptsNeverEnableOrStart reads every script of both packages: the
// only service-manager verbs allowed are daemon-reload, try-restart (of a
// running supervisor, on upgrade) and stop (on removal).
func TestScriptsNeverEnableOrStart(t *testing.T) {
	p := packages(t)
	all := map[string]string{}
	for k, v := range debScripts(t, p) {
		all["deb "+k] = v
	}
	for k, v := range rpmScripts(t, p) {
		all["rpm "+k] = v
	}
	allowed := map[string]bool{"daemon-reload": true, "try-restart": true, "stop": true}
	for name, text := range all {
		for _, line := range strings.Split(text, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "#") || strings.Contains(line, "run: systemctl disable") || strings.Contains(line, "at boot: systemctl enable") {
				continue // comments and the install message
			}
			fields := strings.Fields(line)
			for i, f := range fields {
				switch filepath.Base(f) {
				case "systemctl", "deb-systemd-invoke", "deb-systemd-helper", "service", "invoke-rc.d":
				default:
					continue
				}
				verb := ""
				for _, a := range fields[i+1:] {
					if !strings.HasPrefix(a, "-") {
						verb = a
						break
					}
				}
				if !allowed[verb] {
					t.Errorf("%s: %q runs %s %s", name, line, f, verb)
				}
			}
		}
	}
}
