package dropin

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestRenderSupervisor(t *testing.T) {
	for _, tc := range []struct {
		watchdog time.Duration
		want     string
	}{
		{time.Second, "WatchdogSec=1s\n"},
		{2 * time.Second, "WatchdogSec=2s\n"},
		{1500 * time.Millisecond, "WatchdogSec=1500ms\n"},
	} {
		b, err := RenderSupervisor(Supervisor{Profile: "fast", Watchdog: tc.watchdog})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(Marker+" for "+SupervisorUnit)) {
			t.Errorf("does not start with the marker:\n%s", b)
		}
		if !bytes.Contains(b, []byte("\n[Service]\n")) || !bytes.HasSuffix(b, []byte("\n"+tc.want)) {
			t.Errorf("watchdog %s: want [Service] and a last line %q:\n%s", tc.watchdog, tc.want, b)
		}
		if !strings.Contains(string(b), "profile (fast)") {
			t.Errorf("does not name the profile:\n%s", b)
		}
	}
	if got := SupervisorPath("/etc/systemd/system"); got != "/etc/systemd/system/kha-supervisor.service.d/"+FileName {
		t.Errorf("SupervisorPath = %s", got)
	}
}

// The start-up may wait out a killed predecessor's record: the drop-in
// carries the TimeoutStartSec the configuration needs.
func TestRenderSupervisorStartTimeout(t *testing.T) {
	b, err := RenderSupervisor(Supervisor{Profile: "default", Watchdog: 2 * time.Second, StartTimeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b, []byte("\nWatchdogSec=2s\n# Start-up may wait out a killed predecessor's member record (one TTL):\nTimeoutStartSec=90s\n")) {
		t.Errorf("want WatchdogSec then TimeoutStartSec last:\n%s", b)
	}
}

func TestRenderSupervisorRefuses(t *testing.T) {
	for _, s := range []Supervisor{
		{Profile: "fast", Watchdog: 0},
		{Profile: "fast", Watchdog: -time.Second},
		{Profile: "fast", Watchdog: time.Microsecond},
		{Profile: "", Watchdog: time.Second},
		{Profile: "fast\nExecStart=/bin/sh", Watchdog: time.Second},
		{Profile: "fast", Watchdog: time.Second, StartTimeout: -time.Second},
	} {
		if _, err := RenderSupervisor(s); err == nil {
			t.Errorf("%+v: rendered", s)
		}
	}
}
