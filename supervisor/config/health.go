package config

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Health is the [health] section: per-unit HTTP(S) probes the leader runs
// while it leads and the unit is active (supervisor/health). A unit whose
// probe fails threshold times in a row counts a unit failure, and every
// further failed probe another, toward units.failure_threshold.
type Health struct {
	// Probes are "UNIT=URL", one per probed unit (each in units.managed),
	// e.g. "kube-scheduler.service=https://127.0.0.1:10259/healthz". Empty:
	// no probes (systemd's active state alone is judged).
	Probes []string `toml:"probes"`
	// CA is the bundle an https probe verifies the unit's serving
	// certificate against; Insecure skips verification. An https probe
	// needs exactly one of them.
	CA       string `toml:"ca"`
	Insecure bool   `toml:"insecure"`
	// Interval between the starts of two probes, and Timeout of one. A
	// timeout longer than the interval makes the probes overlap (the next
	// starts on time while one waits), so a hung unit is found after
	// Timeout + (FailureThreshold-1) x Interval without an answer.
	Interval time.Duration `toml:"interval"`
	Timeout  time.Duration `toml:"timeout"`
	// FailureThreshold: consecutive failed probes that make a unit
	// unhealthy.
	FailureThreshold int `toml:"failure_threshold"`
	// Grace: after a unit is seen running on the leader (started,
	// restarted, or this node promoted), failed probes do not count until
	// one succeeded or Grace passed: the components answer /healthz a few
	// seconds after they start.
	Grace time.Duration `toml:"grace"`
}

// maxProbesInFlight bounds health.timeout / health.interval.
const maxProbesInFlight = 10

// DefaultHealth is the section's default: no probes.
func DefaultHealth() Health {
	return Health{
		Interval:         2 * time.Second,
		Timeout:          time.Second,
		FailureThreshold: 3,
		Grace:            30 * time.Second,
	}
}

// HealthProbe is one parsed health.probes entry.
type HealthProbe struct {
	Unit string
	URL  string
}

// ProbeList parses health.probes (Validate has checked it).
func (h Health) ProbeList() ([]HealthProbe, error) {
	var out []HealthProbe
	for i, e := range h.Probes {
		unit, raw, ok := strings.Cut(e, "=")
		if !ok || unit == "" {
			return nil, fmt.Errorf("entry %d: must be UNIT=URL, e.g. %q", i+1, "kube-scheduler.service=https://127.0.0.1:10259/healthz")
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			return nil, fmt.Errorf("entry %d: %q is not an http:// or https://host[:port]/path URL", i+1, raw)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("entry %d: port must be 1-65535", i+1)
			}
		}
		out = append(out, HealthProbe{Unit: unit, URL: raw})
	}
	return out, nil
}

func checkHealth(c Config) *Error {
	h := c.Health
	probes, err := h.ProbeList()
	if err != nil {
		return refuse(c, "health.probes", "%v", err)
	}
	seen := map[string]bool{}
	for i, p := range probes {
		switch {
		case !slices.Contains(c.Units.Managed, p.Unit):
			return refuse(c, "health.probes", "entry %d: %s is not in units.managed", i+1, p.Unit)
		case seen[p.Unit]:
			return refuse(c, "health.probes", "entry %d: %s has two probes", i+1, p.Unit)
		case strings.HasPrefix(p.URL, "https:") && h.CA == "" && !h.Insecure:
			return refuse(c, "health.probes", "entry %d: an https probe needs health.ca (the CA of the unit's serving certificate) or health.insecure = true", i+1)
		}
		seen[p.Unit] = true
	}
	if h.CA != "" && h.Insecure {
		return refuse(c, "health.insecure", "health.ca is set too: verify with the CA or skip verification, not both")
	}
	if h.CA != "" && !filepath.IsAbs(h.CA) {
		return refuse(c, "health.ca", "must be an absolute path")
	}
	for _, key := range []string{"health.interval", "health.timeout"} {
		if err := positive(c, key); err != nil {
			return err
		}
	}
	if h.Timeout > maxProbesInFlight*h.Interval {
		return refuse(c, "health.timeout", "must be at most %d x health.interval (%s): the probes overlap, one starting every interval, and more than %d waiting at once is an interval too short", maxProbesInFlight, h.Interval, maxProbesInFlight)
	}
	if err := nonNegative(c, "health.grace"); err != nil {
		return err
	}
	if h.FailureThreshold < 1 {
		return refuse(c, "health.failure_threshold", "must be at least 1")
	}
	if h.CA == "" {
		return nil
	}
	pem, _, err := readLimited(h.CA)
	if err != nil {
		return unreadable(c, "health.ca", err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pem) {
		return refuse(c, "health.ca", "holds no PEM certificate")
	}
	return nil
}
