package systemd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/util"
)

// ServiceTimes are the settings of one installed service that the fence
// window depends on, as the next start of the unit will use them.
type ServiceTimes struct {
	Found       bool          // the unit is installed (systemd knows it, or a unit file exists)
	Watchdog    time.Duration // WatchdogSec; 0: no watchdog
	TimeoutStop time.Duration // TimeoutStopSec; 0: infinity
	From        string        // where the values were read, for messages
	// WatchdogFile is the file whose WatchdogSec= assignment won, when
	// the values came from files; "" otherwise.
	WatchdogFile string
}

// UnitReader reads a service's effective settings: from systemd when it
// runs, else from the unit file and its drop-ins. Tests inject their own.
type UnitReader interface {
	Service(unit string) (ServiceTimes, error)
}

// systemdDefaultTimeoutStop is DefaultTimeoutStopSec when system.conf does
// not change it.
const systemdDefaultTimeoutStop = 90 * time.Second

// UnitDirs are the system unit directories, highest priority first
// (systemd.unit(5); generator directories left out: they need systemd).
var UnitDirs = []string{
	"/etc/systemd/system.control", "/run/systemd/system.control", "/run/systemd/transient",
	"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
}

// OpenUnitReader returns how to read installed units here: systemd over
// D-Bus when it runs (TimeoutStopUSec as `systemctl show` reports it, and
// WatchdogSec from the files systemd names, FragmentPath and DropInPaths),
// else the unit files and their drop-ins. close releases what the reader
// holds.
func OpenUnitReader(ctx context.Context) (r UnitReader, close func()) {
	files := FileReader{Dirs: UnitDirs}
	if !util.IsRunningSystemd() {
		return files, func() {}
	}
	// The system bus, as systemctl show asks as any user; quiet: a
	// failure to read is the caller's to report.
	u, err := New(ctx, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return fallbackReader{files: files, why: err.Error()}, func() {}
	}
	return systemdReader{ctx: ctx, units: u, files: files}, u.Close
}

// systemdReader asks the running systemd which files make up a unit
// (FragmentPath, DropInPaths) and its TimeoutStopUSec. WatchdogSec is read
// from those files: systemd's WatchdogUSec property is the value the
// running process started with (0 for a unit that is not running), not
// what the next start uses. A unit whose files changed since the last
// daemon-reload is read from the files alone, which is what the next start
// uses once systemd is reloaded (install-dropins reloads it).
type systemdReader struct {
	ctx   context.Context
	units *Units
	files FileReader
}

func (r systemdReader) Service(unit string) (ServiceTimes, error) {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	props, err := r.units.properties(ctx, unit, "")
	if err != nil {
		return ServiceTimes{}, err
	}
	if ls, _ := props["LoadState"].(string); ls == "not-found" || ls == "masked" {
		return ServiceTimes{}, nil
	}
	if reload, _ := props["NeedDaemonReload"].(bool); reload {
		st, err := r.files.Service(unit)
		st.From += ", changed on disk since systemd's last reload"
		return st, err
	}
	fragment, _ := props["FragmentPath"].(string)
	dropins, _ := props["DropInPaths"].([]string)
	if fragment == "" {
		return ServiceTimes{}, fmt.Errorf("systemd: %s has no unit file (FragmentPath)", unit)
	}
	st, err := fromFiles(append([]string{fragment}, dropins...))
	if err != nil {
		return ServiceTimes{}, err
	}
	sp, err := r.units.properties(ctx, unit, "Service")
	if err != nil {
		return ServiceTimes{}, err
	}
	stop, ok := sp["TimeoutStopUSec"].(uint64)
	if !ok {
		return ServiceTimes{}, errors.New("systemd: TimeoutStopUSec missing")
	}
	st.TimeoutStop = usecDuration(stop)
	st.From = "systemd: " + strings.TrimPrefix(st.From, "unit files ")
	return st, nil
}

// usecDuration converts a systemd usec_t (TimeoutStopUSec); infinity
// becomes 0, as fencing.Binding and ServiceTimes mean it.
func usecDuration(v uint64) time.Duration {
	if v == math.MaxUint64 || v > math.MaxInt64/1000 {
		return 0
	}
	return time.Duration(v) * time.Microsecond
}

// fallbackReader reads the files and says why systemd was not asked.
type fallbackReader struct {
	files FileReader
	why   string
}

func (r fallbackReader) Service(unit string) (ServiceTimes, error) {
	st, err := r.files.Service(unit)
	st.From += " (systemd not asked: " + r.why + ")"
	return st, err
}

// FileReader reads a service's unit file and drop-ins the way systemd
// merges them: the unit file from the highest-priority directory holding
// it, then every UNIT.d/*.conf (and TEMPLATE@.service.d/*.conf for an
// instance) in the order of their file names, a name in a higher directory
// hiding the same name in a lower one; the last assignment wins and an
// empty one resets the default.
type FileReader struct {
	Dirs []string // highest priority first (UnitDirs)
}

func (f FileReader) Service(unit string) (ServiceTimes, error) {
	main := ""
	for _, d := range f.Dirs {
		if st, err := os.Stat(filepath.Join(d, unit)); err == nil && st.Mode().IsRegular() {
			main = filepath.Join(d, unit)
			break
		}
	}
	if main == "" {
		return ServiceTimes{From: "unit files"}, nil
	}
	dropDirs := []string{unit + ".d"}
	if at := strings.IndexByte(unit, '@'); at >= 0 {
		dropDirs = append([]string{unit[:at+1] + filepath.Ext(unit) + ".d"}, dropDirs...)
	}
	byName := map[string]string{}
	for _, d := range f.Dirs {
		for _, dd := range dropDirs {
			ms, _ := filepath.Glob(filepath.Join(d, dd, "*.conf"))
			for _, m := range ms {
				if _, seen := byName[filepath.Base(m)]; !seen {
					byName[filepath.Base(m)] = m
				}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	files := []string{main}
	for _, n := range names {
		files = append(files, byName[n])
	}
	return fromFiles(files)
}

// fromFiles merges a unit file and its drop-ins, in the order given.
func fromFiles(files []string) (ServiceTimes, error) {
	st := ServiceTimes{Found: true, TimeoutStop: systemdDefaultTimeoutStop, From: "unit files " + strings.Join(files, ", ")}
	for _, p := range files {
		if err := st.readFile(p); err != nil {
			return ServiceTimes{}, err
		}
	}
	return st, nil
}

// readFile applies one unit file's [Service] WatchdogSec=, TimeoutStopSec=
// and TimeoutSec= (which sets the stop timeout too).
func (st *ServiceTimes) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok || section != "Service" {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		var dst *time.Duration
		reset := time.Duration(0)
		switch key {
		case "WatchdogSec":
			dst = &st.Watchdog
			st.WatchdogFile = path
		case "TimeoutStopSec", "TimeoutSec":
			dst, reset = &st.TimeoutStop, systemdDefaultTimeoutStop
		default:
			continue
		}
		if val == "" {
			*dst = reset
			continue
		}
		d, err := ParseSpan(val)
		if err != nil {
			return fmt.Errorf("%s:%d: %s=%s: %w", path, n, key, val, err)
		}
		*dst = d
	}
	return sc.Err()
}

// spanUnits are systemd.time(7)'s time span units.
var spanUnits = map[string]time.Duration{
	"us": time.Microsecond, "usec": time.Microsecond, "µs": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// ParseSpan parses a systemd time span ("2s", "1min 30s", "1.5s",
// "500ms", a bare number of seconds); "infinity" is 0, as systemd means
// for timeouts.
func ParseSpan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty time span")
	}
	if s == "infinity" {
		return 0, nil
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return seconds(v, time.Second, s)
	}
	var total time.Duration
	rest := s
	for rest = strings.TrimLeft(rest, " "); rest != ""; rest = strings.TrimLeft(rest, " ") {
		i := strings.IndexFunc(rest, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.') })
		if i <= 0 {
			return 0, fmt.Errorf("not a systemd time span: %q", s)
		}
		num := rest[:i]
		rest = strings.TrimLeft(rest[i:], " ")
		j := strings.IndexFunc(rest, func(r rune) bool { return r >= '0' && r <= '9' || r == ' ' || r == '.' })
		if j < 0 {
			j = len(rest)
		}
		unit, ok := spanUnits[rest[:j]]
		if !ok {
			return 0, fmt.Errorf("not a systemd time span: %q (unit %q)", s, rest[:j])
		}
		rest = rest[j:]
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, fmt.Errorf("not a systemd time span: %q", s)
		}
		d, err := seconds(v, unit, s)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

func seconds(v float64, unit time.Duration, s string) (time.Duration, error) {
	if v < 0 || math.IsNaN(v) || v*float64(unit) > math.MaxInt64/2 {
		return 0, fmt.Errorf("not a usable time span: %q", s)
	}
	return time.Duration(math.Round(v * float64(unit))), nil
}
