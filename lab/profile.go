package lab

import "time"

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

// Fast is the brief's "fast" profile (TTL 4 s, renew 0.5 s, S_max 1.5 s):
// it keeps the whole matrix under 15 minutes. The report says so.
var Fast = Profile{
	Name:           "fast",
	TTL:            4 * time.Second,
	Renew:          500 * time.Millisecond,
	RequestTimeout: 500 * time.Millisecond,
	StopTimeout:    1 * time.Second,
	KillGrace:      500 * time.Millisecond,
	Slack:          500 * time.Millisecond,
	Poll:           500 * time.Millisecond,
	// Short, so that the node demoted in scenario 12 is eligible again for
	// the next scenario; the default (2 m) would stall the matrix.
	Cooldown: 10 * time.Second,
}

// Default is the shipped defaults (TTL 10 s), for a slower, closer-to-
// production run.
var Default = Profile{
	Name:           "default",
	TTL:            10 * time.Second,
	Renew:          1 * time.Second,
	RequestTimeout: 1 * time.Second,
	StopTimeout:    2 * time.Second,
	KillGrace:      1 * time.Second,
	Slack:          500 * time.Millisecond,
	Poll:           1 * time.Second,
	Cooldown:       10 * time.Second,
}
