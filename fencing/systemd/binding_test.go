package systemd_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

// TestSystemdReadsBindings: the properties the drop-in check relies on, read
// from a real systemd over the private socket: the packaged drop-in passes;
// a later drop-in that resets ExecStartPre= and lengthens TimeoutStopSec is
// caught, property by property; so are a guard program that is not installed
// and a guard whose failure is ignored ("-"). ExecStart's executable is read
// too (the stray scan's default).
func TestSystemdReadsBindings(t *testing.T) {
	c := container(t)
	s, _ := newPrivateSystemd(t, c)
	const good, bad = "kt-sd-guarded.service", "kt-sd-unguarded.service"
	const missing, ignored = "kt-sd-noguard.service", "kt-sd-ignored.service"
	if err := c.WriteFile(layout.Guard, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{good, bad, missing, ignored} {
		if err := c.WriteFile("/etc/systemd/system/"+u, []byte("[Service]\nExecStart=/bin/sleep infinity\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		p := dropin.Params{Unit: u, StopTimeout: 2 * time.Second}
		if u == missing {
			p.Guard = "/usr/libexec/kha-supervisor/not-here/kha-guard"
		}
		text, err := dropin.Render(p)
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
	if err := c.WriteFile("/etc/systemd/system/"+ignored+".d/90-local.conf", []byte("[Service]\nExecStartPre=\nExecStartPre=-+"+layout.Guard+" %n\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "systemctl", "daemon-reload")
	bs, err := s.Bindings(bg(t, 20*time.Second), []string{good, bad, missing, ignored})
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
	for u, want := range map[string]string{
		missing: "runs the guard /usr/libexec/kha-supervisor/not-here/kha-guard, which is not installed",
		ignored: "has no guard",
	} {
		probs := bs[u].Problems(dropin.SupervisorUnit, 2*time.Second)
		t.Logf("%s: %q", u, probs)
		if len(probs) != 1 || !strings.Contains(probs[0], u+": ExecStartPre "+want) {
			t.Errorf("%s: problems %q, want one saying %q", u, probs, want)
		}
	}
	ex, err := s.Executables(bg(t, 20*time.Second), []string{good})
	if err != nil || !slices.Equal(ex[good], []string{"/bin/sleep"}) {
		t.Fatalf("Executables = %v, %v; want /bin/sleep", ex, err)
	}
}
