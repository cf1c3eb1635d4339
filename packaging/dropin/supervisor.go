package dropin

import (
	"bytes"
	"fmt"
	"path"
	"text/template"
	"time"
)

// Supervisor is what varies in the supervisor unit's own drop-in,
// SupervisorPath: the values of kha-supervisor.service that the
// configuration's profile decides.
type Supervisor struct {
	Profile  string        // the configuration's profile, named in the file's comment
	Watchdog time.Duration // WatchdogSec: enters the fence window (docs/configuration.md)
	// StartTimeout is TimeoutStartSec: long enough for a start-up that
	// waits out a killed predecessor's record (StartTimeout in
	// starttimeout.go sizes it from the configuration). Zero leaves the
	// packaged unit's value.
	StartTimeout time.Duration
	// More [Service] settings of the supervisor unit that follow from the
	// configuration go here, each rendered in the template's marked place.
}

// SupervisorPath is where the supervisor unit's drop-in lives under dir.
func SupervisorPath(dir string) string { return path.Join(dir, SupervisorUnit+".d", FileName) }

// Validate reports why s cannot be rendered, or nil.
func (s Supervisor) Validate() error {
	// systemd's watchdog resolution is a microsecond and 0 disables it;
	// under a millisecond cannot be meant.
	if s.Watchdog < time.Millisecond {
		return fmt.Errorf("supervisor watchdog %s: must be at least 1ms", s.Watchdog)
	}
	if s.StartTimeout < 0 {
		return fmt.Errorf("supervisor start timeout %s: must not be negative", s.StartTimeout)
	}
	if !profileName.MatchString(s.Profile) {
		return fmt.Errorf("profile %q: not a profile name", s.Profile)
	}
	return nil
}

// RenderSupervisor returns the supervisor unit's drop-in for s.
func RenderSupervisor(s Supervisor) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err := supervisorText.Execute(&b, struct {
		Supervisor
		Marker, Unit, WatchdogSec, TimeoutStartSec string
	}{s, Marker, SupervisorUnit, Seconds(s.Watchdog), Seconds(s.StartTimeout)})
	if err != nil {
		return nil, fmt.Errorf("render drop-in for %s: %w", SupervisorUnit, err)
	}
	return b.Bytes(), nil
}

var supervisorText = template.Must(template.New("supervisor").Parse(`{{.Marker}} for {{.Unit}}; do not edit.
# From the configuration's profile ({{.Profile}}). After changing the profile
# (or these values), run: kha-supervisor install-dropins
# A later drop-in (90-*.conf) may override a value on purpose; check-config
# and the daemon refuse one that leaves the fence window too short.

[Service]
# The watchdog enters the fence window:
#   fence_at = t_s + TTL*(1-rho) - S_max - max(lease.slack, WatchdogSec + 250ms)
# (profile fast-kill: - lease.slack, its pings stopping WatchdogSec + 250ms
# before the margin would begin)
# so the profile's lease and this value are chosen together.
WatchdogSec={{.WatchdogSec}}
{{- if .StartTimeout}}
# Start-up may wait out a killed predecessor's member record (one TTL):
TimeoutStartSec={{.TimeoutStartSec}}
{{- end}}
{{- /* Further [Service] settings from Supervisor go below, one per field. */}}
`))
