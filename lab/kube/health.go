package kube

import (
	"bytes"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Probing is the timing of kha-supervisor's [health] section (the
// configuration's defaults: docs/configuration.md).
type Probing struct {
	Interval, Timeout time.Duration
	Threshold         int
	Grace             time.Duration
}

// DefaultProbing is the configuration's default timing, which the lab and
// the example use: a frozen component is unhealthy after about three
// intervals and the leader steps down two probes later
// (units.failure_threshold 3).
var DefaultProbing = Probing{Interval: 2 * time.Second, Timeout: time.Second, Threshold: 3, Grace: 30 * time.Second}

// Health is the supervisor's [health] section probing each component's
// /healthz, verified with ca (HealthSection is its text).
func Health(cs []Component, ca string, p Probing) config.Health {
	h := config.DefaultHealth()
	h.Probes = nil
	for _, c := range cs {
		h.Probes = append(h.Probes, c.Name+".service="+c.HealthURL())
	}
	h.CA = ca
	h.Interval, h.Timeout, h.FailureThreshold, h.Grace = p.Interval, p.Timeout, p.Threshold, p.Grace
	return h
}

// HealthSection renders the supervisor's [health] section probing each
// component's /healthz, verified with ca (the CA that issued their serving
// certificates, --tls-cert-file), with p's threshold and grace; the
// interval and timeout are the profile's. The lab's supervisors and the example in
// packaging/examples/kubernetes are rendered by it.
func HealthSection(cs []Component, ca string, p Probing) []byte {
	var b bytes.Buffer
	b.WriteString("[health]\n# Each component's /healthz on its secure port; kha-supervisor GETs it on the\n" +
		"# leader only. The CA issued the components' serving certificates.\nprobes = [\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "  %q,\n", c.Name+".service="+c.HealthURL())
	}
	fmt.Fprintf(&b, "]\nca = %q\n", ca)
	// interval and timeout are left to the profile: written here they would
	// override the fast profiles' quicker probing for whoever copies this.
	fmt.Fprintf(&b, "# interval and timeout: the profile's (default %s and %s; fast, fast-kill %s and %s).\n",
		config.Profiles["default"].HealthInterval, config.Profiles["default"].HealthTimeout,
		config.Profiles["fast"].HealthInterval, config.Profiles["fast"].HealthTimeout)
	fmt.Fprintf(&b, "failure_threshold = %d\ngrace = %q\n", p.Threshold, p.Grace)
	return b.Bytes()
}
