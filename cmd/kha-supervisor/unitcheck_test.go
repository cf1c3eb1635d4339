package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// fakeUnits is a unitReader over a fixed table; a unit missing from it is
// not installed.
type fakeUnits map[string]serviceTimes

func (f fakeUnits) Service(unit string) (serviceTimes, error) {
	st, ok := f[unit]
	if !ok {
		return serviceTimes{From: "fake"}, nil
	}
	st.Found, st.From = true, "fake"
	return st, nil
}

// In-process commands never read this machine's units: tests must not
// depend on what the build host has installed. useUnits sets a table.
func init() {
	openUnitReader = func(context.Context) (unitReader, func()) { return fakeUnits{}, func() {} }
}

// useUnits makes check-config and run read units from f for one test.
func useUnits(t *testing.T, f fakeUnits) {
	t.Helper()
	old := openUnitReader
	openUnitReader = func(context.Context) (unitReader, func()) { return f, func() {} }
	t.Cleanup(func() { openUnitReader = old })
}

// installed is a node set up as the packages and install-dropins leave it:
// the supervisor unit with watchdog, both default units with
// TimeoutStopSec from stop.
func installed(watchdog, stop time.Duration) fakeUnits {
	f := fakeUnits{dropin.SupervisorUnit: {Watchdog: watchdog}}
	for _, u := range config.Default().Units.Managed {
		f[u] = serviceTimes{TimeoutStop: stop}
	}
	return f
}

// The case: the documented fast settings under the packaged unit's
// WatchdogSec=2s. run refuses them (window 460 ms); check-config must too.
// (accept_short_window: the file's own check would refuse the window under
// an etcd leader election first; this is about the installed watchdog.)
const documentedFast = `node = "m1"
[etcd]
request_timeout = "500ms"
[lease]
ttl = "4s"
renew_interval = "500ms"
accept_short_window = true
[units]
stop_timeout = "1s"
kill_grace = "500ms"
`

func TestCheckConfigRefusesTheInstalledWatchdog(t *testing.T) {
	useUnits(t, installed(2*time.Second, time.Second))
	code, out, errs := runCheckConfig(t, "-c", checkConfigFile(t, documentedFast))
	if code != exitConfig || out != "" {
		t.Fatalf("exit %d, stdout %q; want %d and nothing", code, out, exitConfig)
	}
	for _, want := range []string{
		"kha-supervisor.service: WatchdogSec=2s",
		"fence window 460ms = lease.ttl 4s * (1 - 0.01) - S_max 1.5s - max(lease.slack 500ms, WatchdogSec 2s)",
		"under two renew intervals (2 x lease.renew_interval 500ms)",
		"run refuses to start",
		// The file's keys override the default profile, whose watchdog
		// (2s) does not fit them: the largest that does is 1.46s.
		"Fix: lengthen lease.ttl, or lower WatchdogSec to at most 1460ms",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	if strings.Count(errs, "\n") != 1 {
		t.Errorf("refusal is not one line: %q", errs)
	}
}

// With profile = "fast" and the packaged watchdog still in place, the fix
// named is install-dropins.
func TestCheckConfigNamesInstallDropins(t *testing.T) {
	useUnits(t, installed(2*time.Second, time.Second))
	file := checkConfigFile(t, "node = \"m1\"\nprofile = \"fast\"\n[lease]\nttl = \"4s\"\naccept_short_window = true\n")
	code, _, errs := runCheckConfig(t, "-c", file)
	if want := `Fix: kha-supervisor install-dropins (profile "fast" writes WatchdogSec=1s)`; code != exitConfig || !strings.Contains(errs, want) {
		t.Errorf("exit %d stderr %q; want %d and %q", code, errs, exitConfig, want)
	}
}

func TestCheckConfigRefusesLongTimeoutStopSec(t *testing.T) {
	units := installed(2*time.Second, 2*time.Second)
	units["kube-scheduler.service"] = serviceTimes{TimeoutStop: 90 * time.Second} // no drop-in: systemd's default
	useUnits(t, units)
	code, _, errs := runCheckConfig(t, "-c", checkConfigFile(t, "node = \"m1\"\n"))
	want := "kha-supervisor: kube-scheduler.service: TimeoutStopSec=1m30s (fake) is longer than units.stop_timeout 2s"
	if code != exitConfig || !strings.HasPrefix(errs, want) || !strings.Contains(errs, "install-dropins (writes TimeoutStopSec=2s)") {
		t.Errorf("exit %d stderr %q; want %d and %q...", code, errs, exitConfig, want)
	}
	units["kube-scheduler.service"] = serviceTimes{TimeoutStop: 0} // infinity
	if code, _, errs = runCheckConfig(t, "-c", checkConfigFile(t, "node = \"m1\"\n")); code != exitConfig || !strings.Contains(errs, "TimeoutStopSec=infinity") {
		t.Errorf("infinity: exit %d stderr %q", code, errs)
	}
}

func TestCheckConfigAcceptsMatchingUnits(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		units      fakeUnits
		notes      []string
	}{
		{"fast profile, its drop-ins installed", "node = \"m1\"\nprofile = \"fast\"\n", installed(time.Second, time.Second),
			[]string{"kha-supervisor.service: WatchdogSec=1s (fake): fence window 3.44s, ok", "kube-scheduler.service: TimeoutStopSec=1s (fake), ok"}},
		{"default profile, packaged unit", "node = \"m1\"\n", installed(2*time.Second, 2*time.Second),
			[]string{"WatchdogSec=2s (fake): fence window 4.9s, ok"}},
		{"fast profile, still the packaged watchdog", "node = \"m1\"\nprofile = \"fast\"\n", installed(2*time.Second, time.Second),
			[]string{"fence window 2.44s, ok", `differs from profile "fast"'s 1s`}},
		{"nothing installed", "node = \"m1\"\n", fakeUnits{},
			[]string{"kha-supervisor.service is not installed here; WatchdogSec not checked", "kube-controller-manager.service is not installed here"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useUnits(t, tc.units)
			code, out, errs := runCheckConfig(t, "-c", checkConfigFile(t, tc.file))
			if code != exitOK {
				t.Fatalf("exit %d: %s", code, errs)
			}
			for _, n := range tc.notes {
				if !strings.Contains(out, n) {
					t.Errorf("output lacks %q:\n%s", n, out)
				}
			}
		})
	}
}

// run applies the same check with the watchdog systemd gave it, and logs
// the same message check-config prints.
func TestRunRefusesLikeCheckConfig(t *testing.T) {
	useUnits(t, installed(2*time.Second, time.Second))
	file := checkConfigFile(t, documentedFast)
	_, _, checkErr := runCheckConfig(t, "-c", file)
	cfg, err := config.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if code := checkUnitsAtStart(context.Background(), cfg, 2*time.Second, log); code != exitConfig {
		t.Fatalf("run start-up check: exit %d, want %d\n%s", code, exitConfig, logs.String())
	}
	// The same message; only where the value was read differs.
	msg := strings.TrimSpace(strings.TrimPrefix(checkErr, "kha-supervisor: "))
	msg = strings.Replace(msg, "(fake)", "(WATCHDOG_USEC of this process)", 1)
	var rec bytes.Buffer
	slog.New(slog.NewTextHandler(&rec, nil)).Error("x", "err", msg)
	quoted := rec.String()[strings.Index(rec.String(), "err="):]
	if !strings.Contains(logs.String(), strings.TrimSpace(quoted)) {
		t.Errorf("run logs\n%s\nnot check-config's message\n%s", logs.String(), msg)
	}
	// Without a watchdog (not under systemd) the file alone decides.
	logs.Reset()
	if code := checkUnitsAtStart(context.Background(), cfg, 0, log); code != exitOK {
		t.Errorf("no watchdog: exit %d\n%s", code, logs.String())
	}
}

func TestFileReader(t *testing.T) {
	etc, lib := t.TempDir(), t.TempDir()
	write := func(dir, rel, text string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(lib, "kha-supervisor.service", "[Unit]\nWatchdogSec=9s\n[Service]\nType=notify\nWatchdogSec=2s\nTimeoutStopSec=30s\n")
	write(lib, "kha-supervisor.service.d/50-kha-supervisor.conf", "[Service]\nWatchdogSec=5s\n")
	write(etc, "kha-supervisor.service.d/50-kha-supervisor.conf", "# hides lib's\n[Service]\nWatchdogSec=1s\n")
	write(etc, "kha-supervisor.service.d/10-early.conf", "[Service]\nWatchdogSec=7s\n")
	write(lib, "a.service", "[Service]\nExecStart=/bin/true\n")
	write(lib, "b.service", "[Service]\nTimeoutSec=1min 30s\n")
	write(etc, "b.service.d/x.conf", "[Service]\nTimeoutStopSec=1500ms\n")
	write(lib, "c@.service", "[Service]\nTimeoutStopSec=3\n")
	write(lib, "c@.service.d/y.conf", "[Service]\nTimeoutStopSec=\n")
	write(etc, "orphan.service.d/z.conf", "[Service]\nTimeoutStopSec=1s\n")
	write(lib, "bad.service", "[Service]\nWatchdogSec=soon\n")
	r := fileReader{dirs: []string{etc, lib}}
	for _, tc := range []struct {
		unit     string
		found    bool
		wd, stop time.Duration
	}{
		{"kha-supervisor.service", true, time.Second, 30 * time.Second},
		{"a.service", true, 0, 90 * time.Second},
		{"b.service", true, 0, 1500 * time.Millisecond},
		{"c@x.service", false, 0, 0}, // no instance file: templates are not read as instances here
		{"orphan.service", false, 0, 0},
		{"missing.service", false, 0, 0},
	} {
		st, err := r.Service(tc.unit)
		if err != nil {
			t.Errorf("%s: %v", tc.unit, err)
			continue
		}
		if st.Found != tc.found || (tc.found && (st.Watchdog != tc.wd || st.TimeoutStop != tc.stop)) {
			t.Errorf("%s: found %v watchdog %s stop %s; want %v %s %s (%s)", tc.unit, st.Found, st.Watchdog, st.TimeoutStop, tc.found, tc.wd, tc.stop, st.From)
		}
	}
	if _, err := r.Service("bad.service"); err == nil || !strings.Contains(err.Error(), "bad.service:2: WatchdogSec=soon") {
		t.Errorf("bad.service: %v", err)
	}
}

func TestParseSystemdSpan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"2s": 2 * time.Second, "2": 2 * time.Second, "1.5s": 1500 * time.Millisecond, "500ms": 500 * time.Millisecond,
		"1min 30s": 90 * time.Second, "1min30s": 90 * time.Second, "2 min": 2 * time.Minute, "1h": time.Hour,
		"250msec": 250 * time.Millisecond, "100us": 100 * time.Microsecond, "infinity": 0, " 3s ": 3 * time.Second,
	} {
		if got, err := parseSystemdSpan(in); err != nil || got != want {
			t.Errorf("%q: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "5x", "-1s", "s", "1s 2", "1e400s"} {
		if got, err := parseSystemdSpan(in); err == nil {
			t.Errorf("%q: accepted as %s", in, got)
		}
	}
}

// errUnits fails every read.
type errUnits struct{}

func (errUnits) Service(string) (serviceTimes, error) { return serviceTimes{}, errors.New("bus gone") }

// A unit that cannot be read is not a pass in silence: check-config warns
// on stderr (the file itself is fine, so the exit stays 0).
func TestCheckConfigWarnsWhenUnitsCannotBeRead(t *testing.T) {
	old := openUnitReader
	openUnitReader = func(context.Context) (unitReader, func()) { return errUnits{}, func() {} }
	t.Cleanup(func() { openUnitReader = old })
	code, out, errs := runCheckConfig(t, "-c", checkConfigFile(t, "node = \"m1\"\n"))
	if code != exitOK || !strings.Contains(errs, "warning: kha-supervisor.service: cannot read its settings (bus gone); WatchdogSec not checked") ||
		!strings.Contains(out, "NOT CHECKED: kube-scheduler.service") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}

// The fix named depends on where the refused watchdog comes from and on
// whether the profile's own fits.
func TestWatchdogFix(t *testing.T) {
	load := func(text string) config.Config {
		c, err := config.Load(checkConfigFile(t, text))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fast := load("node = \"m1\"\nprofile = \"fast\"\n")
	tight := load(documentedFast)
	for _, tc := range []struct {
		name string
		cfg  config.Config
		file string
		want string
	}{
		{"ours", fast, "/etc/systemd/system/kha-supervisor.service.d/50-kha-supervisor.conf", `kha-supervisor install-dropins (profile "fast" writes WatchdogSec=1s)`},
		{"packaged unit", fast, "/usr/lib/systemd/system/kha-supervisor.service", "kha-supervisor install-dropins"},
		{"the administrator's", fast, "/etc/systemd/system/kha-supervisor.service.d/90-local.conf", "remove WatchdogSec= from /etc/systemd/system/kha-supervisor.service.d/90-local.conf"},
		{"profile's does not fit", tight, "", "lower WatchdogSec to at most 1460ms"},
	} {
		w := tc.cfg.Window()
		if got := watchdogFix(tc.cfg, w, tc.cfg.Lease.RenewInterval, tc.file); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
