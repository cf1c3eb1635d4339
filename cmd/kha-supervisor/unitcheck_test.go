package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// fakeUnits is a systemd.UnitReader over a fixed table; a unit missing from it is
// not installed.
type fakeUnits map[string]systemd.ServiceTimes

func (f fakeUnits) Service(unit string) (systemd.ServiceTimes, error) {
	st, ok := f[unit]
	if !ok {
		return systemd.ServiceTimes{From: "fake"}, nil
	}
	st.Found, st.From = true, "fake"
	return st, nil
}

// In-process commands never read this machine's units: tests must not
// depend on what the build host has installed. useUnits sets a table.
func init() {
	daemon.OpenUnitReader = func(context.Context) (systemd.UnitReader, func()) { return fakeUnits{}, func() {} }
}

// useUnits makes check-config and run read units from f for one test.
func useUnits(t *testing.T, f fakeUnits) {
	t.Helper()
	old := daemon.OpenUnitReader
	daemon.OpenUnitReader = func(context.Context) (systemd.UnitReader, func()) { return f, func() {} }
	t.Cleanup(func() { daemon.OpenUnitReader = old })
}

// installed is a node set up as the packages and install-dropins leave it:
// the supervisor unit with watchdog, both default units with
// TimeoutStopSec from stop.
func installed(watchdog, stop time.Duration) fakeUnits {
	f := fakeUnits{dropin.SupervisorUnit: {Watchdog: watchdog}}
	for _, u := range config.Default().Units.Managed {
		f[u] = systemd.ServiceTimes{TimeoutStop: stop}
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
		"fence window 210ms = lease.ttl 4s * (1 - 0.01) - S_max 1.5s - max(lease.slack 500ms, WatchdogSec 2s + 250ms for its timer)",
		"under two renew intervals (2 x lease.renew_interval 500ms)",
		"run refuses to start",
		// The file's keys override the default profile, whose watchdog
		// (2s) does not fit them: the largest that does is 1.21s (with the 250 ms by which systemd may fire it late).
		"Fix: lengthen lease.ttl, or lower WatchdogSec to at most 1210ms",
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
	if want := `Fix: kha-supervisor install-dropins (profile "fast" writes WatchdogSec=750ms)`; code != exitConfig || !strings.Contains(errs, want) {
		t.Errorf("exit %d stderr %q; want %d and %q", code, errs, exitConfig, want)
	}
}

func TestCheckConfigRefusesLongTimeoutStopSec(t *testing.T) {
	units := installed(2*time.Second, 2*time.Second)
	units["kube-scheduler.service"] = systemd.ServiceTimes{TimeoutStop: 90 * time.Second} // no drop-in: systemd's default
	useUnits(t, units)
	code, _, errs := runCheckConfig(t, "-c", checkConfigFile(t, "node = \"m1\"\n"))
	want := "kha-supervisor: kube-scheduler.service: TimeoutStopSec=1m30s (fake) is longer than units.stop_timeout 2s"
	if code != exitConfig || !strings.HasPrefix(errs, want) || !strings.Contains(errs, "install-dropins (writes TimeoutStopSec=2s)") {
		t.Errorf("exit %d stderr %q; want %d and %q...", code, errs, exitConfig, want)
	}
	units["kube-scheduler.service"] = systemd.ServiceTimes{TimeoutStop: 0} // infinity
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
		{"fast profile, its drop-ins installed", "node = \"m1\"\nprofile = \"fast\"\n", installed(750*time.Millisecond, time.Second),
			[]string{"kha-supervisor.service: WatchdogSec=750ms (fake): fence window 3.44s, ok", "kube-scheduler.service: TimeoutStopSec=1s (fake), ok"}},
		{"default profile, packaged unit", "node = \"m1\"\n", installed(2*time.Second, 2*time.Second),
			[]string{"WatchdogSec=2s (fake): fence window 4.65s, ok"}},
		{"fast profile, still the packaged watchdog", "node = \"m1\"\nprofile = \"fast\"\n", installed(2*time.Second, time.Second),
			[]string{"fence window 2.19s, ok", `differs from profile "fast"'s 750ms`}},
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
	if code := daemon.CheckUnitsAtStart(context.Background(), cfg, 2*time.Second, log); code != exitConfig {
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
	if code := daemon.CheckUnitsAtStart(context.Background(), cfg, 0, log); code != exitOK {
		t.Errorf("no watchdog: exit %d\n%s", code, logs.String())
	}
}

// errUnits fails every read.
type errUnits struct{}

func (errUnits) Service(string) (systemd.ServiceTimes, error) {
	return systemd.ServiceTimes{}, errors.New("bus gone")
}

// A unit that cannot be read is not a pass in silence: check-config warns
// on stderr (the file itself is fine, so the exit stays 0).
func TestCheckConfigWarnsWhenUnitsCannotBeRead(t *testing.T) {
	old := daemon.OpenUnitReader
	daemon.OpenUnitReader = func(context.Context) (systemd.UnitReader, func()) { return errUnits{}, func() {} }
	t.Cleanup(func() { daemon.OpenUnitReader = old })
	code, out, errs := runCheckConfig(t, "-c", checkConfigFile(t, "node = \"m1\"\n"))
	if code != exitOK || !strings.Contains(errs, "warning: kha-supervisor.service: cannot read its settings (bus gone); WatchdogSec not checked") ||
		!strings.Contains(out, "NOT CHECKED: kube-scheduler.service") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errs)
	}
}
