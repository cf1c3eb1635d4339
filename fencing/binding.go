package fencing

import (
	"context"
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"time"
)

// Binding is what ties a managed unit to the supervisor, as systemd has
// loaded it (the packaged drop-in's effect, after every other drop-in).
// Without it the crash and watchdog guarantees are gone silently: no
// BindsTo=, and a dead supervisor leaves the units running; no guard, and a
// standby's `systemctl start` runs them; a long TimeoutStopSec, and systemd
// alone stops them after the lease could lapse.
type Binding struct {
	Unit         string
	BindsTo      []string
	After        []string
	ExecStartPre [][]string // argv of each ExecStartPre= line whose failure fails the start (path first; "-" lines left out)
	// Missing lists the ExecStartPre= programs that are not installed or
	// not executable here (the reader's look at the file): a guard among
	// them would refuse every start, the leader's too.
	Missing     []string
	TimeoutStop time.Duration
	KillMode    string
	SendSIGKILL bool
}

// BindingReader is implemented by Units that can read the units' bindings.
// A unit missing from the answer is not checked (Memory reports only units
// a test configured).
type BindingReader interface {
	Bindings(ctx context.Context, units []string) (map[string]Binding, error)
}

// FixCommand is what an operator runs to restore the drop-ins.
const FixCommand = "kha-supervisor install-dropins"

// Problems lists what is wrong with b for a supervisor running as unit
// supervisor with the given stop timeout, one sentence per property, each
// naming the unit, the property and the fix.
func (b Binding) Problems(supervisor string, stop time.Duration) []string {
	var out []string
	bad := func(prop, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s: %s %s; run `%s` (and check later drop-ins with `systemctl cat %s`)",
			b.Unit, prop, fmt.Sprintf(format, args...), FixCommand, b.Unit))
	}
	if !slices.Contains(b.BindsTo, supervisor) {
		bad("BindsTo", "does not include %s (is %q): a crashed or killed supervisor would leave the unit running", supervisor, strings.Join(b.BindsTo, " "))
	}
	if !slices.Contains(b.After, supervisor) {
		bad("After", "does not include %s", supervisor)
	}
	switch guard, ok := findGuard(b.ExecStartPre); {
	case !ok:
		bad("ExecStartPre", "has no guard (kha-guard UNIT; a line prefixed with - does not count, its failure is ignored): a start on a standby would not be refused")
	case slices.Contains(b.Missing, guard):
		bad("ExecStartPre", "runs the guard %s, which is not installed or not executable: every start of the unit would fail", guard)
	}
	switch {
	case StopTimeoutFits(b.TimeoutStop, stop):
	case InfiniteTimeout(b.TimeoutStop):
		bad("TimeoutStopUSec", "is infinite: systemd alone would never SIGKILL the unit (want at most %s, units.stop_timeout)", stop)
	default:
		bad("TimeoutStopUSec", "is %s, longer than units.stop_timeout %s: without the supervisor the unit could outlive the lease", b.TimeoutStop, stop)
	}
	if b.KillMode != "control-group" {
		bad("KillMode", "is %q, want control-group: other processes of the unit would survive a stop", b.KillMode)
	}
	if !b.SendSIGKILL {
		bad("SendSIGKILL", "is no: a unit ignoring SIGTERM would never be killed")
	}
	return out
}

// StopTimeoutFits is the rule on a managed unit's TimeoutStopSec, for the
// drop-in check of the running daemon (Problems) and the installed-unit
// check of check-config and start-up alike: with the supervisor gone
// systemd alone stops the unit, so its stop timeout must be finite and at
// most units.stop_timeout (stop), or the unit could outlive the lease.
func StopTimeoutFits(timeoutStop, stop time.Duration) bool {
	return !InfiniteTimeout(timeoutStop) && timeoutStop <= stop
}

// InfiniteTimeout reports whether a systemd timeout read as d is infinity
// (0, as fencing/systemd reads it; or the largest duration).
func InfiniteTimeout(d time.Duration) bool {
	return d <= 0 || d == time.Duration(math.MaxInt64)
}

// findGuard returns the program of the ExecStartPre= line that runs the
// guard: kha-guard UNIT (what install-dropins writes) or `kha-supervisor
// guard UNIT` (the drop-ins written before kha-guard, and install-dropins
// --binary).
func findGuard(lines [][]string) (program string, ok bool) {
	for _, argv := range lines {
		if len(argv) < 2 {
			continue
		}
		switch path.Base(argv[0]) {
		case "kha-guard":
			return argv[0], true
		case "kha-supervisor":
			if slices.Contains(argv[1:], "guard") {
				return argv[0], true
			}
		}
	}
	return "", false
}
