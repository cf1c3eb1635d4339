package systemd_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
)

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
	r := systemd.FileReader{Dirs: []string{etc, lib}}
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

func TestParseSpan(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"2s": 2 * time.Second, "2": 2 * time.Second, "1.5s": 1500 * time.Millisecond, "500ms": 500 * time.Millisecond,
		"1min 30s": 90 * time.Second, "1min30s": 90 * time.Second, "2 min": 2 * time.Minute, "1h": time.Hour,
		"250msec": 250 * time.Millisecond, "100us": 100 * time.Microsecond, "infinity": 0, " 3s ": 3 * time.Second,
	} {
		if got, err := systemd.ParseSpan(in); err != nil || got != want {
			t.Errorf("%q: %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "5x", "-1s", "s", "1s 2", "1e400s"} {
		if got, err := systemd.ParseSpan(in); err == nil {
			t.Errorf("%q: accepted as %s", in, got)
		}
	}
}
