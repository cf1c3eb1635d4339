package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// electionRounds budgets the pre-vote and vote rounds and the new etcd
// leader's first commit on a LAN (docs/configuration.md, "Profiles").
const electionRounds = 100 * time.Millisecond

// Stall is the fence window weighed against the renewal gap an etcd leader
// election causes, the one stall every profile promises to ride through
// (docs/configuration.md: X > G).
type Stall struct {
	Watchdog time.Duration // WatchdogSec: the profile's (install-dropins writes it) or the installed one
	Election time.Duration // the etcd election timeout the profile assumes
	Window   time.Duration // X = TTL*(1-rho) - S_max - max(slack, Watchdog)
	Gap      time.Duration // G = 2*renew_interval + 2*Election + electionRounds
	MinTTL   time.Duration // the smallest whole-second lease.ttl with Window > Gap
}

// Stall computes the fence window under the profile's watchdog and the
// etcd leader election gap it must outlast.
func (c Config) Stall() Stall { return c.StallUnder(c.SelectedProfile().Watchdog) }

// StallUnder is Stall under the given WatchdogSec (the one installed, which
// an older drop-in may have left other than the profile's).
func (c Config) StallUnder(watchdog time.Duration) Stall {
	p := c.SelectedProfile()
	w := c.Window()
	w.Watchdog = watchdog
	s := Stall{Watchdog: watchdog, Election: p.ElectionTimeout, Window: w.Span(w.TTL)}
	s.Gap = 2*c.Lease.RenewInterval + 2*p.ElectionTimeout + electionRounds
	need := (s.Gap + w.StopMax + w.Margin()).Seconds() / (1 - w.ClockRate)
	s.MinTTL = time.Duration(math.Floor(need)+1) * time.Second
	return s
}

// Short reports whether an etcd leader election would fence a healthy
// leader with these settings.
func (s Stall) Short() bool { return s.Window <= s.Gap }

// stallKeys are the keys the Stall relation is made of.
var stallKeys = []string{"lease.ttl", "lease.renew_interval", "lease.clock_rate_error", "units.stop_timeout", "units.kill_grace", "lease.slack", "profile"}

// checkStall refuses a fence window shorter than the renewal gap of the
// etcd leader election the profile promises to ride through: the file would
// pass the two-renewal rule and still fence a healthy leader on the first
// stall of a stock etcd leader. lease.accept_short_window = true runs it
// anyway (Warnings says so); its window then only covers two renewals.
func checkStall(c Config) *Error {
	s := c.Stall()
	if !s.Short() || c.Lease.AcceptShortWindow {
		return nil
	}
	e := refuse(c, "lease.ttl",
		"fence window %s under the profile's WatchdogSec=%s does not outlast the %s without a renewal that an etcd leader election takes "+
			"(2 * lease.renew_interval %s + 2 * election timeout %s + %s, profile %s): a stall of the etcd leader would fence a healthy leader; "+
			"raise lease.ttl to at least %s, lower the others, or set lease.accept_short_window = true to accept the risk",
		s.Window, s.Watchdog, s.Gap, c.Lease.RenewInterval, s.Election, electionRounds, quote(c.Profile), s.MinTTL)
	e.Related = stallKeys
	return e
}

// Warnings are what the daemon and check-config say about a configuration
// they accept but that an operator should know about.
func (c Config) Warnings() []string {
	var out []string
	if s := c.Stall(); s.Short() && c.Lease.AcceptShortWindow {
		out = append(out, fmt.Sprintf("lease.accept_short_window = true: the fence window %s (under WatchdogSec=%s) is shorter than the %s an etcd leader election can leave without a renewal; a stall of the etcd leader will fence the leader and fail over (lease.ttl %s or more rides it out)",
			s.Window, s.Watchdog, s.Gap, s.MinTTL))
	} else if w := c.thinMargin(); w != "" {
		out = append(out, w)
	}
	if c.Etcd.Username != "" {
		out = append(out, "etcd.username is set: with a password etcd's Go client authenticates again before every streamed request, every lease renewal included "+
			"(a bcrypt check and a raft write on etcd), and etcd's default simple tokens are valid on one member only, so a renewal can be refused "+
			"(\"invalid auth token\") and a healthy leader fenced; prefer a client certificate whose common name is the etcd user "+
			"(etcd.cert and etcd.key, etcd.username and etcd.password_file empty; docs/install.md, step 2)")
	}
	if c.Etcd.Cert != "" {
		var plain []string
		for _, ep := range c.Etcd.Endpoints {
			if strings.HasPrefix(ep, "http://") {
				plain = append(plain, ep)
			}
		}
		if len(plain) > 0 {
			out = append(out, fmt.Sprintf("etcd.cert is set but etcd.endpoints %s use plain http://: the client certificate is never sent there and the traffic is not encrypted; use https://",
				strings.Join(plain, ", ")))
		}
	}
	return out
}

// relation names every key of a refused relation with where its value
// comes from: the file's line, the profile, or the default.
func (c Config) relation(d *document, keys []string) string {
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := fieldText(c, k)
		var from string
		switch line := d.lineOf(k); {
		case line > 0:
			from = fmt.Sprintf("line %d", line)
		case d == nil:
			from = "set in code"
		case c.FromProfileKey(k):
			from = "from profile " + quote(c.Profile)
		default:
			from = "default"
		}
		parts = append(parts, fmt.Sprintf("%s = %s (%s)", k, v, from))
	}
	return "the keys: " + strings.Join(parts, ", ")
}

// thinMargin warns when keys the file sets leave the fence window less
// margin over the etcd election gap than the profile itself has: accepted,
// but a file written for a profile's older numbers (fast-kill renewed every
// 500 ms until 3 December; at its TTL of 4 s that leaves 0.06 s) rides out
// less than its profile promises.
func (c Config) thinMargin() string {
	pc := Default()
	pc.Node = c.Node
	if err := pc.UseProfile(c.SelectedProfile().Name); err != nil {
		return ""
	}
	got, want := c.Stall(), pc.Stall()
	if got.Short() || got.Window-got.Gap >= want.Window-want.Gap {
		return ""
	}
	return fmt.Sprintf("the fence window %s leaves %s over the %s an etcd leader election can leave without a renewal, less than profile %s's own %s: %s; unset them to take the profile's",
		got.Window, got.Window-got.Gap, got.Gap, quote(c.Profile), want.Window-want.Gap, c.relationOfSet(stallKeys))
}

// relationOfSet names the keys among keys whose value is not the profile's.
func (c Config) relationOfSet(keys []string) string {
	var set []string
	for _, k := range keys {
		if k != "profile" && !c.FromProfileKey(k) && slices.Contains(ProfileKeys(), k) {
			set = append(set, k+" = "+fieldText(c, k))
		}
	}
	if len(set) == 0 {
		return "set by the file or in code"
	}
	return "set by the file: " + strings.Join(set, ", ")
}
