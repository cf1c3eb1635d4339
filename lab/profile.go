package lab

import (
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Profile is the supervisor timing the lab runs with.
type Profile struct {
	Name           string
	TTL            time.Duration
	Renew          time.Duration
	RequestTimeout time.Duration
	StopTimeout    time.Duration
	KillGrace      time.Duration
	Slack          time.Duration
	Poll           time.Duration
	Cooldown       time.Duration
}

// fromConfig is the shipped profile name (config.Profiles, the one
// definition) with the lab's own cooldown.
func fromConfig(name string, cooldown time.Duration) Profile {
	p := config.Profiles[name]
	return Profile{
		Name:           p.Name,
		TTL:            p.TTL,
		Renew:          p.RenewInterval,
		RequestTimeout: p.RequestTimeout,
		StopTimeout:    p.StopTimeout,
		KillGrace:      p.KillGrace,
		Slack:          config.Default().Lease.Slack,
		Poll:           p.PollInterval,
		Cooldown:       cooldown,
	}
}

// Fast is the shipped "fast" profile: it keeps the whole matrix short. The
// report says so. Its cooldown is short, so that the node demoted in
// scenario 12 is eligible again for the next scenario; the default (2 m)
// would stall the matrix.
var Fast = fromConfig("fast", 10*time.Second)

// FastKill is the shipped "fast-kill" profile: "fast" with the units killed
// at once, TTL 4 s, renewals every 250 ms and WatchdogSec=500ms (issue 21,
// the partition floor).
var FastKill = fromConfig("fast-kill", 10*time.Second)

// Default is the shipped defaults (TTL 10 s), for a slower, closer-to-
// production run.
var Default = fromConfig("default", 10*time.Second)
