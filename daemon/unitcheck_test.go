package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func configFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadConfig loads text as a configuration file.
func loadConfig(t *testing.T, text string) config.Config {
	t.Helper()
	c, err := config.Load(configFile(t, text))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tight is the documented fast settings (see cmd/kha-supervisor's
// documentedFast): the profile's watchdog does not fit them.
const tight = `node = "m1"
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

// The fix named depends on where the refused watchdog comes from and on
// whether the profile's own fits.
func TestWatchdogFix(t *testing.T) {
	fast := loadConfig(t, "node = \"m1\"\nprofile = \"fast\"\n")
	tightCfg := loadConfig(t, tight)
	for _, tc := range []struct {
		name string
		cfg  config.Config
		file string
		want string
	}{
		{"ours", fast, "/etc/systemd/system/kha-supervisor.service.d/50-kha-supervisor.conf", `kha-supervisor install-dropins (profile "fast" writes WatchdogSec=750ms)`},
		{"packaged unit", fast, "/usr/lib/systemd/system/kha-supervisor.service", "kha-supervisor install-dropins"},
		{"the administrator's", fast, "/etc/systemd/system/kha-supervisor.service.d/90-local.conf", "remove WatchdogSec= from /etc/systemd/system/kha-supervisor.service.d/90-local.conf"},
		{"profile's does not fit", tightCfg, "", "lower WatchdogSec to at most 1210ms"}, // 1460ms less the 250 ms systemd may fire late
	} {
		w := tc.cfg.Window()
		if got := watchdogFix(tc.cfg, w, tc.cfg.Lease.RenewInterval, tc.file); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// fixedUnits answers every unit with the same settings.
type fixedUnits systemd.ServiceTimes

func (f fixedUnits) Service(string) (systemd.ServiceTimes, error) {
	return systemd.ServiceTimes(f), nil
}

// check-config and start-up (CheckInstalled) refuse a managed unit's
// TimeoutStopSec exactly when the running daemon's drop-in check
// (fencing.Binding.Problems) does: one rule, fencing.StopTimeoutFits.
func TestInstalledAndRunningChecksAgreeOnTimeoutStop(t *testing.T) {
	cfg := config.Default()
	cfg.Node = "m1"
	stop := cfg.Units.StopTimeout
	good := fencing.Binding{BindsTo: []string{layout.SupervisorUnit}, After: []string{layout.SupervisorUnit},
		ExecStartPre: [][]string{{"/usr/bin/kha-supervisor", "guard"}}, KillMode: "control-group", SendSIGKILL: true}
	for _, d := range []time.Duration{0, time.Millisecond, stop - time.Millisecond, stop, stop + time.Millisecond, 90 * time.Second} {
		b := good
		b.Unit, b.TimeoutStop = "x.service", d
		running := len(b.Problems(layout.SupervisorUnit, stop)) > 0
		installed := CheckInstalled(cfg, fixedUnits{Found: true, Watchdog: cfg.SelectedProfile().Watchdog, TimeoutStop: d, From: "test"}).Refusal != nil
		if running != installed {
			t.Errorf("TimeoutStopSec %s: the drop-in check refuses: %v; check-config and start-up refuse: %v", d, running, installed)
		}
		if want := d > 0 && d <= stop; installed == want {
			t.Errorf("TimeoutStopSec %s (units.stop_timeout %s): refused %v", d, stop, installed)
		}
	}
}

// The installed WatchdogSec, not only the profile's, must leave a fence
// window that outlasts a stock etcd leader election: fast's window under a
// WatchdogSec=3s (install-dropins never run, an old drop-in) still passes
// the two-renewal rule (1.44 s > 1 s) but fences a healthy leader at the
// first stall of the etcd leader (G = 3.1 s). A warning with the fix, not a
// refusal: an upgrade must not stop a running leader. Under fast-kill the
// watchdog is the backstop and costs the window nothing: a 2 s one passes
// without a warning (its pings still cover two renewals), and one that
// leaves its pings less than two renewals is refused.
func TestInstalledWatchdogMustOutlastAnEtcdElection(t *testing.T) {
	for _, tc := range []struct {
		profile  string
		watchdog time.Duration
		warn     string // "" none
		refuse   bool
	}{
		{"fast", config.Profiles["fast"].Watchdog, "", false},
		{"fast", 3 * time.Second, "WatchdogSec=3s", false},
		{"fast-kill", config.Profiles["fast-kill"].Watchdog, "", false},
		{"fast-kill", 2 * time.Second, "", false},
		{"fast-kill", 3200 * time.Millisecond, "", true},
	} {
		cfg := loadConfig(t, "node = \"m1\"\nprofile = \""+tc.profile+"\"\n")
		uc := CheckInstalled(cfg, fixedUnits{Found: true, Watchdog: tc.watchdog, TimeoutStop: cfg.Units.StopTimeout, From: "test"})
		w := strings.Join(uc.Warnings, "\n")
		switch {
		case tc.refuse != (uc.Refusal != nil):
			t.Errorf("%s under WatchdogSec=%s: refusal %v, want refused %v", tc.profile, tc.watchdog, uc.Refusal, tc.refuse)
		case tc.warn == "" && len(uc.Warnings) > 0:
			t.Errorf("%s under WatchdogSec=%s: warnings %q, want none", tc.profile, tc.watchdog, uc.Warnings)
		case tc.warn != "" && (!strings.Contains(w, tc.warn) || !strings.Contains(w, "etcd leader election") || !strings.Contains(w, "install-dropins")):
			t.Errorf("%s under WatchdogSec=%s: warnings %q: want one naming the watchdog, the etcd election and the fix", tc.profile, tc.watchdog, uc.Warnings)
		}
	}
}
