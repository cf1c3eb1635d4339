package systemd_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

// TestSystemdReadsBindings: the properties the drop-in check relies on, read
// from a real systemd over the private socket: the packaged drop-in passes;
// a later drop-in that resets ExecStartPre= and lengthens TimeoutStopSec is
// caught, property by property. ExecStart's executable is read too (the
// stray scan's default).
func TestSystemdReadsBindings(t *testing.T) {
	c := container(t)
	s, _ := newPrivateSystemd(t, c)
	const good, bad = "kt-sd-guarded.service", "kt-sd-unguarded.service"
	for _, u := range []string{good, bad} {
		if err := c.WriteFile("/etc/systemd/system/"+u, []byte("[Service]\nExecStart=/bin/sleep infinity\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		text, err := dropin.Render(dropin.Params{Unit: u, StopTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteFile(dropin.Path("/etc/systemd/system", u), text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WriteFile("/etc/systemd/system/"+bad+".d/90-local.conf", []byte("[Service]\nExecStartPre=\nTimeoutStopSec=90\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "systemctl", "daemon-reload")
	bs, err := s.Bindings(bg(t, 20*time.Second), []string{good, bad})
	if err != nil {
		t.Fatalf("Bindings: %v", err)
	}
	t.Logf("packaged: %+v", bs[good])
	if probs := bs[good].Problems(dropin.SupervisorUnit, 2*time.Second); len(probs) > 0 {
		t.Fatalf("the packaged drop-in reads as wrong: %q", probs)
	}
	probs := bs[bad].Problems(dropin.SupervisorUnit, 2*time.Second)
	t.Logf("overridden: %q", probs)
	joined := strings.Join(probs, "\n")
	if len(probs) != 2 || !strings.Contains(joined, bad+": ExecStartPre") || !strings.Contains(joined, bad+": TimeoutStopUSec is 1m30s") {
		t.Fatalf("overridden drop-in: problems %q, want ExecStartPre and TimeoutStopUSec", probs)
	}
	ex, err := s.Executables(bg(t, 20*time.Second), []string{good})
	if err != nil || !slices.Equal(ex[good], []string{"/bin/sleep"}) {
		t.Fatalf("Executables = %v, %v; want /bin/sleep", ex, err)
	}
}
