// Package config reads and validates kha-supervisor's one TOML file.
//
// Load decodes the file strictly on top of Default() and refuses anything it
// cannot vouch for (unknown keys, wrong types, bad durations, invalid unit
// names, unreadable or exposed secret files, and timings whose fence window
// leaves no room for renewals) with one *Error naming the file, the key, the
// line and the value. docs/configuration.md lists the rules.
package config

import (
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/layout"
)

// DefaultPath is where the packaged daemon and its commands look for the file.
const DefaultPath = layout.ConfigPath

// Config is the whole file. Field comments name the TOML key.
type Config struct {
	Node    string `toml:"node"`    // this member's name; default: hostname
	Cluster string `toml:"cluster"` // election group; also the etcd key prefix component
	Profile string `toml:"profile"` // timing profile, a key of Profiles; default DefaultProfile
	// Peers are the node names expected in this group (this node may be
	// listed too); empty means no expectation. A peer without a member
	// record for longer than a TTL is reported: it may be configured into
	// another group.
	Peers []string `toml:"peers"`

	Etcd    Etcd    `toml:"etcd"`
	Lease   Lease   `toml:"lease"`
	Units   Units   `toml:"units"`
	Guard   Guard   `toml:"guard"`
	Log     Log     `toml:"log"`
	HTTP    HTTP    `toml:"http"`
	Hooks   Hooks   `toml:"hooks"`
	History History `toml:"history"`

	APIFence  APIFence  `toml:"api_fence"`  // apifence.go
	EtcdFence EtcdFence `toml:"etcd_fence"` // etcdfence.go
	Health    Health    `toml:"health"`     // health.go

	// Path is the file this configuration was read from (not a TOML key).
	Path string `toml:"-"`
	// FromProfile lists the dotted keys whose values Load (or UseProfile)
	// took from the profile because the file left them out; nil for
	// Default() (not a TOML key).
	FromProfile []string `toml:"-"`
}

// Etcd is how to reach the etcd cluster.
type Etcd struct {
	Endpoints      []string      `toml:"endpoints"`
	Prefix         string        `toml:"prefix"` // key prefix; default "/kha-supervisor"
	CA             string        `toml:"ca"`     // PEM CA bundle for the servers
	Cert           string        `toml:"cert"`   // client certificate (PEM)
	Key            string        `toml:"key"`    // client key (PEM)
	Username       string        `toml:"username"`
	PasswordFile   string        `toml:"password_file"` // file holding the password; must not be world-readable
	DialTimeout    time.Duration `toml:"dial_timeout"`
	RequestTimeout time.Duration `toml:"request_timeout"`
	// ResetOnFence: once a fence has the units down, destroy this host's
	// TCP connections to the endpoints (fencing/connreset), so that what
	// the node's kube-apiserver had already written to etcd for the
	// fenced components is discarded rather than delivered when a
	// partition heals. Needs CAP_NET_ADMIN.
	ResetOnFence bool `toml:"reset_on_fence"`
	// ResetSilent: while this node holds the election key (from the
	// promotion on), destroy its TCP connections to the endpoints that
	// stop answering (supervisor/silent.go), so that the node's
	// kube-apiserver stops sending the components' requests to a member
	// a partition took away or that stalls (they would wait for its TCP
	// user timeout or keepalive). Needs CAP_NET_ADMIN.
	ResetSilent bool `toml:"reset_silent"`
}

// Lease sets the election lease and the renewal that proves it.
type Lease struct {
	TTL           time.Duration `toml:"ttl"`
	RenewInterval time.Duration `toml:"renew_interval"`
	ClockRate     float64       `toml:"clock_rate_error"` // rho
	Slack         time.Duration `toml:"slack"`            // delta
	TakeoverDelay time.Duration `toml:"takeover_delay"`   // extra wait after winning, before starting units
	// AcceptShortWindow runs a fence window shorter than the etcd leader
	// election the profile rides through (checkStall), with a warning.
	AcceptShortWindow bool `toml:"accept_short_window"`
}

// Units lists the managed systemd units and how to handle them.
type Units struct {
	Managed          []string      `toml:"managed"` // start order; stopped in reverse
	StartTimeout     time.Duration `toml:"start_timeout"`
	StopTimeout      time.Duration `toml:"stop_timeout"`
	KillGrace        time.Duration `toml:"kill_grace"`
	PollInterval     time.Duration `toml:"poll_interval"`
	FailureThreshold int           `toml:"failure_threshold"` // failures within FailureWindow that make the leader demote
	FailureWindow    time.Duration `toml:"failure_window"`
	Cooldown         time.Duration `toml:"cooldown"` // stay out of the election this long after such a demotion
	// Processes are the managed components' executables (absolute paths)
	// to look for outside their units; empty: each unit's ExecStart.
	Processes   []string `toml:"processes"`
	StrayPolicy string   `toml:"stray_policy"` // "kill" (SIGTERM, SIGKILL after stop_timeout) or "report"
	// ExecWatch: learn of each exec of a managed executable from the
	// kernel (fanotify) and act on a copy outside its unit at once, not at
	// the next poll. Needs CAP_SYS_ADMIN; without it the poll alone runs,
	// loudly.
	ExecWatch bool `toml:"exec_watch"`
}

// Stray policies: what a member does with a managed component's process
// found running outside its unit.
const (
	StrayKill   = "kill"
	StrayReport = "report"
)

// Guard is the local socket answering the units' ExecStartPre= guard.
type Guard struct {
	Socket string `toml:"socket"`
}

// Log sets log/slog output.
type Log struct {
	Level  string `toml:"level"`  // debug, info, warn, error
	Format string `toml:"format"` // text or json
}

// HTTP is the local metrics and health endpoint. Empty Listen disables it.
type HTTP struct {
	Listen string `toml:"listen"`
}

// Hooks are argv vectors run synchronously at transitions, never through a
// shell. Empty means no hook.
type Hooks struct {
	OnPromote         []string      `toml:"on_promote"`
	OnDemote          []string      `toml:"on_demote"`
	OnFence           []string      `toml:"on_fence"`
	Timeout           time.Duration `toml:"timeout"`
	AbortOnPromoteErr bool          `toml:"abort_on_promote_failure"`
}

// History bounds the transition log kept in etcd.
type History struct {
	Retain int `toml:"retain"`
}

// Default returns the configuration used for every key the file leaves out.
// The timing keys come from the default profile (Profiles), their one
// definition.
func Default() Config {
	p := Profiles[DefaultProfile]
	return Config{
		Cluster: "kube-control-plane",
		Profile: DefaultProfile,
		Etcd: Etcd{
			Endpoints:      []string{"https://127.0.0.1:2379"},
			Prefix:         "/kha-supervisor",
			DialTimeout:    2 * time.Second,
			RequestTimeout: p.RequestTimeout,
			ResetOnFence:   true,
			ResetSilent:    true,
		},
		Lease: Lease{
			TTL:           p.TTL,
			RenewInterval: p.RenewInterval,
			ClockRate:     0.01,
			Slack:         500 * time.Millisecond,
		},
		Units: Units{
			Managed:          []string{"kube-controller-manager.service", "kube-scheduler.service"},
			StartTimeout:     10 * time.Second,
			StopTimeout:      p.StopTimeout,
			KillGrace:        p.KillGrace,
			PollInterval:     p.PollInterval,
			FailureThreshold: 3,
			FailureWindow:    5 * time.Minute,
			Cooldown:         2 * time.Minute,
			StrayPolicy:      StrayKill,
			ExecWatch:        true,
		},
		Guard:   Guard{Socket: layout.GuardSocket},
		Log:     Log{Level: "info", Format: "text"},
		HTTP:    HTTP{Listen: "127.0.0.1:9731"},
		Hooks:   Hooks{Timeout: 10 * time.Second, AbortOnPromoteErr: true},
		History: History{Retain: 1000},

		APIFence:  DefaultAPIFence(),
		EtcdFence: EtcdFence{Role: "kube-apiserver"},
		Health:    DefaultHealth(),
	}
}

// Timeouts is the unit-control budget.
func (c Config) Timeouts() fencing.Timeouts {
	return fencing.Timeouts{
		Start:     c.Units.StartTimeout,
		Stop:      c.Units.StopTimeout,
		KillGrace: c.Units.KillGrace,
	}
}

// Window is the fence window these settings give (docs/architecture.md).
func (c Config) Window() fencing.Window {
	return fencing.Window{
		TTL:       c.Lease.TTL,
		ClockRate: c.Lease.ClockRate,
		StopMax:   c.Timeouts().StopMax(),
		Slack:     c.Lease.Slack,
		// The watchdog is the backstop only where the fence is short: a
		// unit's SIGKILL must come within lease.slack of the fence instant,
		// or an orderly fence would be cut short by the watchdog.
		Backstop: c.SelectedProfile().WatchdogBackstop && c.Units.StopTimeout < c.Lease.Slack,
	}
}
