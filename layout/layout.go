// Package layout is the one home of every path and name the installed
// package fixes: the daemon, its packaging, its tests and the lab read them
// from here, so a path is spelled once. It imports nothing of the project.
package layout

const (
	// Binary is where the package installs kha-supervisor.
	Binary = "/usr/bin/kha-supervisor"
	// Guard is where the package installs kha-guard, the managed units'
	// ExecStartPre= check (cmd/kha-guard): `kha-supervisor guard` without
	// the daemon's dependencies, which every unit start would pay for.
	Guard = "/usr/libexec/kha-supervisor/kha-guard"
	// SupervisorUnit is the daemon's own systemd unit.
	SupervisorUnit = "kha-supervisor.service"
	// ConfigPath is the configuration file commands read unless told
	// otherwise (-c, KHA_CONFIG).
	ConfigPath = "/etc/kha-supervisor/config.toml"
	// RunDir holds what lives only as long as the boot: the guard socket,
	// fencing.env and the daemon's state for its next incarnation
	// (RuntimeDirectory= of the unit, root only).
	RunDir = "/run/kha-supervisor"
	// GuardSocket is the root-only socket the guard asks (guard.socket).
	GuardSocket = RunDir + "/guard.sock"
	// FencingEnv is the managed units' EnvironmentFile=- with this term's
	// fencing token, written before they start.
	FencingEnv = RunDir + "/fencing.env"
	// StateDir keeps what must survive a reboot (StateDirectory= of the
	// unit).
	StateDir = "/var/lib/kha-supervisor"
)
