package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// DefaultProfile is the profile a file that sets no `profile` key gets.
const DefaultProfile = "default"

// Profile is one named, consistent set of the timing values that depend on
// each other: the lease, its renewal, the stop budget and the supervisor
// unit's watchdog together make the fence window (docs/configuration.md), so
// an operator picks them as one with `profile = "NAME"` and overrides single
// keys only on purpose. Profiles is the one definition; Default(), the lab
// and the tests read it.
type Profile struct {
	Name    string
	Summary string // one line, for check-config
	// Etcd is what the profile assumes of the etcd cluster, for
	// check-config and the docs.
	Etcd string
	// ElectionTimeout is the etcd election timeout the profile is built to
	// ride through: a leader must keep its units across the renewal gap an
	// etcd leader election causes (Stall), or a file is refused.
	ElectionTimeout time.Duration

	RequestTimeout time.Duration // etcd.request_timeout
	TTL            time.Duration // lease.ttl
	RenewInterval  time.Duration // lease.renew_interval
	StopTimeout    time.Duration // units.stop_timeout
	KillGrace      time.Duration // units.kill_grace
	PollInterval   time.Duration // units.poll_interval
	// HealthInterval and HealthTimeout time the [health] probes: with
	// health.failure_threshold they are how long a hung component takes to
	// be found and restarted in place.
	HealthInterval time.Duration // health.interval
	HealthTimeout  time.Duration // health.timeout
	// Slack is delta, what the fence instant keeps free after S_max for the
	// loop's own lateness (lease.slack).
	Slack time.Duration
	// Watchdog is the supervisor unit's WatchdogSec: not a key of this file
	// but of kha-supervisor.service, written by install-dropins and read
	// back by check-config and at start-up. It enters the fence window.
	Watchdog time.Duration
	// WatchdogBackstop makes the watchdog the backstop for a late fence
	// (fencing.Window.Backstop): the pings stop W + S_max before the lease
	// could lapse, and the fence instant keeps only lease.slack after S_max.
	// Only where the fence is short: Config.Window turns it off when a file
	// makes units.stop_timeout reach lease.slack.
	WatchdogBackstop bool
}

// Profiles are the shipped profiles by name. Their numbers are argued in
// docs/configuration.md ("Profiles"): each keeps a healthy leader through an
// etcd leader election on stock etcd timing.
var Profiles = map[string]Profile{
	"default": {
		Name:    "default",
		Summary: "takeover about 10 s after a failure; rides out 4.65 s without a renewal",
		Etcd:    "stock etcd timing (heartbeat 100 ms, election timeout 1 s) or faster",

		ElectionTimeout: time.Second,
		RequestTimeout:  1 * time.Second,
		TTL:             10 * time.Second,
		RenewInterval:   1 * time.Second,
		StopTimeout:     2 * time.Second,
		KillGrace:       1 * time.Second,
		PollInterval:    1 * time.Second,
		HealthInterval:  2 * time.Second,
		HealthTimeout:   1 * time.Second,
		Slack:           500 * time.Millisecond,
		Watchdog:        2 * time.Second,
	},
	"fast": {
		Name:    "fast",
		Summary: "takeover about 6 s after a failure; rides out 3.44 s without a renewal",
		Etcd:    "stock etcd timing (heartbeat 100 ms, election timeout 1 s) or faster",

		ElectionTimeout: time.Second,
		RequestTimeout:  500 * time.Millisecond,
		// 6 s, not 4 s: with WatchdogSec=750ms a 4 s lease leaves a 1.46 s
		// fence window, less than a stock etcd election can take (up to
		// 2 s) plus the renewal cadence on both sides of it (1 s).
		TTL:           6 * time.Second,
		RenewInterval: 500 * time.Millisecond,
		StopTimeout:   1 * time.Second,
		KillGrace:     500 * time.Millisecond,
		PollInterval:  500 * time.Millisecond,
		// A hung component is found after health.failure_threshold (3)
		// probes in a row fail; they start every 250 ms and overlap, each
		// waiting up to 1.25 s, so after 1.25 + 2 x 0.25 = 1.75 s without
		// an answer (1.75-2 s after it hung), and is restarted in place. A
		// live component may take 1.25 s to answer. Sequential probes timed
		// 300 ms (0.9-1.2 s of silence) failed healthy components at load
		// 40-50 on the lab's 2-core machine and restarted them in a loop;
		// 1 s sequential probes (3-4 s) were slower than a lease.
		HealthInterval: 250 * time.Millisecond,
		HealthTimeout:  1250 * time.Millisecond,
		Slack:          500 * time.Millisecond,
		// 750 ms, pinged every 150 ms (supervisor.tickFor): the margin
		// is W + 0.25 s (systemd may fire the watchdog that late,
		// fencing.WatchdogAccuracy) = 1 s, so X = 5.94 - 1.5 - 1 = 3.44 s
		// keeps 0.34 s over a stock etcd election's 3.1 s renewal gap.
		// With 1 s the margin would be 1.25 s and X 3.19 s: 0.09 s.
		Watchdog: 750 * time.Millisecond,
	},
	// "fast" with the units killed at once instead of stopped gracefully,
	// for components that hold no lease of their own (kube-scheduler and
	// kube-controller-manager with --leader-elect=false): the stop budget
	// and the watchdog that "fast" spends 2.5 s of its window on shrink to
	// 0.3 s and 0.45 s (the watchdog, 500 ms, becomes the backstop),
	// renewals go out every 250 ms, and the lease shrinks with them to 4 s,
	// so a rack cut costs less than with --leader-elect tuned 5/3/1 (issue
	// 21).
	"fast-kill": {
		Name:    "fast-kill",
		Summary: "takeover about 4 s after a failure; units killed at once; rides out 3.21 s without a renewal",
		Etcd:    "stock etcd timing (heartbeat 100 ms, election timeout 1 s) or faster",

		ElectionTimeout: time.Second,
		// A renewal is answered within 250 ms or retried: a healthy etcd
		// answers in milliseconds; one that is slower than this for the
		// whole window (3.21 s) fences the leader.
		RequestTimeout: 250 * time.Millisecond,
		// 4 s: the shortest whole-second TTL that keeps at least the
		// 0.34 s margin "fast" has over a stock etcd election's renewal
		// gap, here 2 x 0.25 + 2 x 1 + 0.1 = 2.6 s: X = 3.96 - 0.3 -
		// 0.45 = 3.21 s, margin 0.61 s (3 s would leave X = 2.22 s).
		TTL:           4 * time.Second,
		RenewInterval: 250 * time.Millisecond,
		// Killed at once: SIGTERM, SIGKILL 100 ms later (the units'
		// TimeoutStopSec too), confirmed from the control group within
		// 200 ms. A file that wants a graceful stop sets
		// units.stop_timeout, and the lease.ttl the stall check asks for.
		StopTimeout:  100 * time.Millisecond,
		KillGrace:    200 * time.Millisecond,
		PollInterval: 500 * time.Millisecond,
		// The probes as "fast" times them.
		HealthInterval: 250 * time.Millisecond,
		HealthTimeout:  1250 * time.Millisecond,
		// The watchdog (500 ms, pinged every 100 ms by the loop,
		// supervisor.tickFor) is the backstop for a frozen or late loop:
		// its pings stop at t_s + 3.96 - 0.3 - 0.5 - 0.25 = t_s + 2.91 s
		// (0.25 s: how late systemd may fire it, fencing.WatchdogAccuracy),
		// so such a loop is killed between t_s + 3.41 s and t_s + 3.66 s and
		// its units are down by t_s + 3.96 s. The fence instant keeps 450 ms
		// after S_max: the 250 ms by which systemd may fire early within
		// that, and 200 ms for the fence itself to confirm the units down
		// before it (a unit that outlives SIGTERM is killed after 100 ms;
		// with 100 ms for the fence, systemd's kill cut 2 of about 15
		// fences short in the lab, 5 December).
		Slack:            450 * time.Millisecond,
		Watchdog:         500 * time.Millisecond,
		WatchdogBackstop: true,
	},
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(Profiles))
	for n := range Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// profileKeys are the file's keys a profile sets, with the profile field
// that holds each value.
var profileKeys = []struct {
	key   string
	value func(Profile) time.Duration
}{
	{"etcd.request_timeout", func(p Profile) time.Duration { return p.RequestTimeout }},
	{"lease.ttl", func(p Profile) time.Duration { return p.TTL }},
	{"lease.renew_interval", func(p Profile) time.Duration { return p.RenewInterval }},
	{"units.stop_timeout", func(p Profile) time.Duration { return p.StopTimeout }},
	{"units.kill_grace", func(p Profile) time.Duration { return p.KillGrace }},
	{"units.poll_interval", func(p Profile) time.Duration { return p.PollInterval }},
	{"health.interval", func(p Profile) time.Duration { return p.HealthInterval }},
	{"health.timeout", func(p Profile) time.Duration { return p.HealthTimeout }},
	{"lease.slack", func(p Profile) time.Duration { return p.Slack }},
}

// ProfileKeys lists the dotted keys a profile sets.
func ProfileKeys() []string {
	out := make([]string, len(profileKeys))
	for i, k := range profileKeys {
		out[i] = k.key
	}
	return out
}

// UseProfile sets c.Profile and every key the profile sets, overriding what
// c held: for configurations built in code (the lab, tests). A file gets its
// profile through Load, where the keys it sets itself win.
func (c *Config) UseProfile(name string) error {
	return c.applyProfile(name, func(string) bool { return false })
}

// applyProfile sets every profile key that explicit does not claim, and
// records which ones it set in c.FromProfile.
func (c *Config) applyProfile(name string, explicit func(key string) bool) error {
	p, ok := Profiles[name]
	if !ok {
		return fmt.Errorf("unknown profile %q", name)
	}
	c.Profile = name
	c.FromProfile = nil
	cv := reflect.ValueOf(c).Elem()
	for _, k := range profileKeys {
		if explicit(k.key) {
			continue
		}
		cv.FieldByIndex(lookupKey(k.key).index).Set(reflect.ValueOf(k.value(p)))
		c.FromProfile = append(c.FromProfile, k.key)
	}
	return nil
}

// resolveProfile applies the file's profile to every profile key the file
// leaves out. An unknown name is refused here, before validation, because
// the values it would set are unknown too.
func (d *document) resolveProfile() error {
	name := d.cfg.Profile
	if _, ok := Profiles[name]; !ok {
		return &Error{File: d.file, Key: "profile", Line: d.lineOf("profile"), Value: truncate(quote(name)), Msg: unknownProfileMsg()}
	}
	return d.cfg.applyProfile(name, func(key string) bool {
		return d.md.IsDefined(strings.Split(key, ".")...)
	})
}

func unknownProfileMsg() string {
	return "unknown profile; valid profiles: " + strings.Join(quoted(ProfileNames()), ", ")
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = quote(s)
	}
	return out
}

// checkProfile refuses a configuration built in code with an unknown
// profile (Load refuses one in a file while decoding).
func checkProfile(c Config) *Error {
	if _, ok := Profiles[c.Profile]; !ok {
		return refuse(c, "profile", "%s", unknownProfileMsg())
	}
	return nil
}

// SelectedProfile is the profile c names (the default profile for an
// unknown name, which Validate refuses).
func (c Config) SelectedProfile() Profile {
	if p, ok := Profiles[c.Profile]; ok {
		return p
	}
	return Profiles[DefaultProfile]
}

// FromProfileKey reports whether key's value came from the profile rather
// than from the file.
func (c Config) FromProfileKey(key string) bool { return slices.Contains(c.FromProfile, key) }
