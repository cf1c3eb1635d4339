package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/fencing/systemd"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// OpenUnitReader is how the installed units are read: systemd's reader
// (fencing/systemd). A variable so that tests can inject one.
var OpenUnitReader = systemd.OpenUnitReader

// UnitCheck is what CheckInstalled found: the refusal `run` would give
// (nil when none), notes worth printing either way, and warnings about
// checks that could not be made (a unit whose settings could not be read).
type UnitCheck struct {
	Refusal  error
	Notes    []string
	Warnings []string
}

// CheckInstalled applies to the installed units the rules the fence window
// needs beyond the configuration file: the supervisor unit's WatchdogSec
// must leave two renew intervals (the margin after S_max is
// max(lease.slack, WatchdogSec); under a backstop the same span is how long
// its pings last after a renewal), and every managed unit's TimeoutStopSec
// must not exceed units.stop_timeout (when the supervisor is gone, systemd
// alone stops them, and a longer timeout would let them outlive the lease).
// check-config and run both call it, so they refuse alike and with the same
// message. A unit that is not installed is noted, not refused.
func CheckInstalled(cfg config.Config, r systemd.UnitReader) UnitCheck {
	var uc UnitCheck
	if err := uc.supervisor(cfg, r); err != nil {
		uc.Refusal = err
		return uc
	}
	for _, u := range cfg.Units.Managed {
		if err := uc.managed(cfg, r, u); err != nil {
			uc.Refusal = err
			return uc
		}
	}
	return uc
}

func (uc *UnitCheck) note(format string, args ...any) {
	uc.Notes = append(uc.Notes, fmt.Sprintf(format, args...))
}

func (uc *UnitCheck) supervisor(cfg config.Config, r systemd.UnitReader) error {
	unit := dropin.SupervisorUnit
	want := cfg.SelectedProfile().Watchdog
	st, err := r.Service(unit)
	switch {
	case err != nil:
		uc.Warnings = append(uc.Warnings, fmt.Sprintf("%s: cannot read its settings (%v); WatchdogSec not checked", unit, err))
		return nil
	case !st.Found:
		uc.note("%s is not installed here; WatchdogSec not checked (install-dropins writes the profile's, %s)", unit, dropin.Seconds(want))
		return nil
	}
	w := cfg.Window()
	w.Watchdog = st.Watchdog
	renew := cfg.Lease.RenewInterval
	if err := w.Validate(renew); err != nil {
		// min(Span, PingSpan) is the formula's value under a backstop too,
		// where it is how long the pings last after a renewal.
		return fmt.Errorf("%s: WatchdogSec=%s (%s) gives fence window %s = lease.ttl %s * (1 - %g) - S_max %s - max(lease.slack %s, WatchdogSec %s + %s for its timer), under two renew intervals (2 x lease.renew_interval %s); run refuses to start. Fix: %s",
			unit, span(st.Watchdog), st.From, min(w.Span(w.TTL), w.PingSpan(w.TTL)), w.TTL, w.ClockRate, w.StopMax, w.Slack, span(st.Watchdog), fencing.WatchdogAccuracy, renew,
			watchdogFix(cfg, w, renew, st.WatchdogFile))
	}
	uc.stall(cfg, st)
	uc.note("%s: WatchdogSec=%s (%s): fence window %s, ok", unit, span(st.Watchdog), st.From, w.Span(w.TTL))
	if st.Watchdog != want {
		uc.note("%s: WatchdogSec differs from profile %q's %s; kha-supervisor install-dropins writes the profile's", unit, cfg.Profile, dropin.Seconds(want))
	}
	return nil
}

// stall warns about an installed WatchdogSec under which the fence window
// no longer outlasts the renewal gap of a stock etcd leader election, the
// relation the configuration's own check (config's checkStall) enforces
// under the profile's watchdog: a drop-in of an older version or profile, or
// none at all (the packaged unit's 2 s), can leave a longer one. A warning,
// not a refusal: the window still proves the fence (Validate above), an
// etcd leader stall merely fails over, and a package upgrade must not turn a
// running leader into one that refuses to start.
func (uc *UnitCheck) stall(cfg config.Config, st systemd.ServiceTimes) {
	s := cfg.StallUnder(st.Watchdog)
	if !s.Short() {
		return
	}
	msg := fmt.Sprintf("%s: WatchdogSec=%s (%s) gives fence window %s, not longer than the %s without a renewal an etcd leader election takes (profile %q assumes WatchdogSec=%s): a stall of the etcd leader will fence the leader and fail over",
		dropin.SupervisorUnit, span(st.Watchdog), st.From, s.Window, s.Gap, cfg.Profile, dropin.Seconds(cfg.SelectedProfile().Watchdog))
	if !cfg.Lease.AcceptShortWindow {
		msg += ". Fix: " + stallFix(cfg, st)
	}
	uc.Warnings = append(uc.Warnings, msg)
}

// stallFix names what gives back the profile's watchdog: install-dropins,
// or removing the administrator's setting first.
func stallFix(cfg config.Config, st systemd.ServiceTimes) string {
	if file := st.WatchdogFile; !writtenByUs(file) {
		return fmt.Sprintf("remove WatchdogSec= from %s, then kha-supervisor install-dropins", file)
	}
	return fmt.Sprintf("kha-supervisor install-dropins (profile %q writes WatchdogSec=%s)", cfg.Profile, dropin.Seconds(cfg.SelectedProfile().Watchdog))
}

// writtenByUs: a setting from file (none known, the packaged unit or
// install-dropins' drop-in) is one install-dropins replaces.
func writtenByUs(file string) bool {
	return file == "" || filepath.Base(file) == dropin.FileName || filepath.Base(file) == dropin.SupervisorUnit
}

func (uc *UnitCheck) managed(cfg config.Config, r systemd.UnitReader, unit string) error {
	limit := cfg.Units.StopTimeout
	st, err := r.Service(unit)
	switch {
	case err != nil:
		uc.Warnings = append(uc.Warnings, fmt.Sprintf("%s: cannot read its settings (%v); TimeoutStopSec not checked", unit, err))
		return nil
	case !st.Found:
		uc.note("%s is not installed here; TimeoutStopSec not checked", unit)
		return nil
	}
	if !fencing.StopTimeoutFits(st.TimeoutStop, limit) {
		return fmt.Errorf("%s: TimeoutStopSec=%s (%s) is longer than units.stop_timeout %s: with the supervisor gone systemd alone stops the unit and would let it outlive the lease (S_max = units.stop_timeout + units.kill_grace = %s); run refuses to start. Fix: kha-supervisor install-dropins (writes TimeoutStopSec=%s)",
			unit, timeout(st.TimeoutStop), st.From, limit, fencing.Timeouts{Stop: limit, KillGrace: cfg.Units.KillGrace}.StopMax(), dropin.Seconds(limit))
	}
	uc.note("%s: TimeoutStopSec=%s (%s), ok", unit, timeout(st.TimeoutStop), st.From)
	return nil
}

// watchdogFix says what makes a refused watchdog fit: the profile's value
// when it fits (install-dropins writes it), unless the value comes from a
// file install-dropins does not write; else the largest value that fits.
func watchdogFix(cfg config.Config, w fencing.Window, renew time.Duration, file string) string {
	want := cfg.SelectedProfile().Watchdog
	w.Watchdog = want
	profileFits := w.Validate(renew) == nil
	w.Watchdog = 0
	// W plus the watchdog timer's lateness must fit what two renewals
	// leave.
	most := w.Span(w.TTL) - 2*renew + w.Slack - fencing.WatchdogAccuracy
	ours := writtenByUs(file)
	switch {
	case profileFits && ours:
		return fmt.Sprintf("kha-supervisor install-dropins (profile %q writes WatchdogSec=%s)", cfg.Profile, dropin.Seconds(want))
	case profileFits:
		return fmt.Sprintf("remove WatchdogSec= from %s (then kha-supervisor install-dropins: profile %q writes WatchdogSec=%s)", file, cfg.Profile, dropin.Seconds(want))
	case most >= time.Millisecond && most > w.Slack:
		return fmt.Sprintf("lengthen lease.ttl, or lower WatchdogSec to at most %s in a later drop-in for %s", dropin.Seconds(most), dropin.SupervisorUnit)
	}
	return "lengthen lease.ttl (or shorten units.stop_timeout, units.kill_grace)"
}

// span prints a watchdog setting; 0 is off.
func span(d time.Duration) string {
	if d == 0 {
		return "0 (off)"
	}
	return d.String()
}

// timeout prints a timeout setting; 0 is infinity.
func timeout(d time.Duration) string {
	if d == 0 {
		return "infinity"
	}
	return d.String()
}

// CheckUnitsAtStart is CheckInstalled at `run` start-up, with the
// watchdog systemd actually gave this process (WATCHDOG_USEC) for the
// supervisor unit: the same rules and message as check-config.
func CheckUnitsAtStart(ctx context.Context, cfg config.Config, wd time.Duration, log *slog.Logger) int {
	r, closeReader := OpenUnitReader(ctx)
	defer closeReader()
	uc := CheckInstalled(cfg, runningReader{UnitReader: r, watchdog: wd})
	if uc.Refusal != nil {
		log.Error("refusing to start", "err", uc.Refusal, "config", cfg.Path)
		return ExitConfig
	}
	for _, n := range uc.Notes {
		log.Debug("installed units", "note", n)
	}
	for _, w := range uc.Warnings {
		log.Warn("installed units", "warning", w)
	}
	w := cfg.Window()
	w.Watchdog = wd
	log.Info("fence window", "span", w.Span(w.TTL), "watchdog", wd, "profile", cfg.Profile)
	return ExitOK
}

// runningReader answers for the supervisor unit with the watchdog of this
// very process, and asks r for every other unit.
type runningReader struct {
	systemd.UnitReader
	watchdog time.Duration
}

func (r runningReader) Service(unit string) (systemd.ServiceTimes, error) {
	if unit != dropin.SupervisorUnit {
		return r.UnitReader.Service(unit)
	}
	from := "WATCHDOG_USEC of this process"
	if r.watchdog == 0 {
		from = "no systemd watchdog for this process"
	}
	// Where the value was set, when the files still say the same, so that
	// the fix named is the one check-config names.
	file := ""
	if st, err := r.UnitReader.Service(unit); err == nil && st.Found && st.Watchdog == r.watchdog {
		file = st.WatchdogFile
	}
	return systemd.ServiceTimes{Found: true, Watchdog: r.watchdog, From: from, WatchdogFile: file}, nil
}
