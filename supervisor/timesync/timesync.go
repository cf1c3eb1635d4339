// Package timesync tells how fast the local time daemon may slew the clock,
// so that start-up can warn when that exceeds lease.clock_rate_error (rho).
//
// The supervisor measures its own fence window on CLOCK_MONOTONIC_RAW, which
// no daemon slews. etcd does not: its leader times leases on Go's monotonic
// clock (CLOCK_MONOTONIC), which NTP slewing speeds up by as much as the
// daemon's maximum slew rate. A lease may then lapse that much earlier in real
// time, and rho must cover it. On control planes with stacked etcd the etcd
// members run on these very nodes, so the local daemon's setting is the one
// that matters.
package timesync

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// Limits, in parts per million.
const (
	// ChronyDefaultMaxSlew is chrony's maxslewrate when not configured.
	ChronyDefaultMaxSlew = 83333.333
	// KernelPLLMaxSlew bounds daemons that slew through the kernel's PLL
	// (systemd-timesyncd, ntpd): 500 ppm.
	KernelPLLMaxSlew = 500
)

// Daemon is one time daemon found and the fastest it may slew.
type Daemon struct {
	Name    string
	File    string  // the configuration it was read from
	MaxSlew float64 // ppm
	Why     string  // where the figure comes from
}

// Config files looked for, relative to the root.
var (
	chronyFiles    = []string{"etc/chrony/chrony.conf", "etc/chrony.conf"}
	timesyncdFiles = []string{"etc/systemd/timesyncd.conf", "usr/lib/systemd/systemd-timesyncd", "lib/systemd/systemd-timesyncd"}
	ntpFiles       = []string{"etc/ntpsec/ntp.conf", "etc/ntp.conf"}
)

// Find reports the time daemons configured under root (a file system as
// seen from "/"; tests pass a fake tree).
func Find(root fs.FS) ([]Daemon, error) {
	var out []Daemon
	if f := first(root, chronyFiles); f != "" {
		d, err := chrony(root, f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	if f := first(root, timesyncdFiles); f != "" {
		out = append(out, Daemon{Name: "systemd-timesyncd", File: "/" + f, MaxSlew: KernelPLLMaxSlew, Why: "slews through the kernel PLL, at most 500 ppm"})
	}
	if f := first(root, ntpFiles); f != "" {
		out = append(out, Daemon{Name: "ntpd", File: "/" + f, MaxSlew: KernelPLLMaxSlew, Why: "slews through the kernel PLL, at most 500 ppm"})
	}
	return out, nil
}

func first(root fs.FS, names []string) string {
	for _, n := range names {
		if _, err := fs.Stat(root, n); err == nil {
			return n
		}
	}
	return ""
}

// chrony reads maxslewrate from file and the files its include and confdir
// directives name (one level).
func chrony(root fs.FS, file string) (Daemon, error) {
	d := Daemon{Name: "chronyd", File: "/" + file, MaxSlew: ChronyDefaultMaxSlew, Why: "chrony's default maxslewrate"}
	files := []string{file}
	for i := 0; i < len(files) && i < 64; i++ {
		set, more, err := chronyFile(root, files[i], &d)
		if err != nil {
			return d, err
		}
		if set {
			d.File = "/" + files[i]
		}
		files = append(files, more...)
	}
	return d, nil
}

func chronyFile(root fs.FS, file string, d *Daemon) (set bool, more []string, err error) {
	fh, err := root.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil, nil // an include that does not exist
		}
		return false, nil, fmt.Errorf("timesync: %w", err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], "!") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch strings.ToLower(f[0]) {
		case "maxslewrate":
			if len(f) < 2 {
				return false, nil, fmt.Errorf("timesync: /%s:%d: maxslewrate without a value", file, n)
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil || v < 0 {
				return false, nil, fmt.Errorf("timesync: /%s:%d: maxslewrate %q is not a rate in ppm", file, n, f[1])
			}
			d.MaxSlew, d.Why, set = v, "maxslewrate", true
		case "include":
			for _, g := range f[1:] {
				more = append(more, glob(root, g)...)
			}
		case "confdir":
			for _, dir := range f[1:] {
				more = append(more, glob(root, path.Join(dir, "*.conf"))...)
			}
		}
	}
	return set, more, sc.Err()
}

func glob(root fs.FS, pattern string) []string {
	m, _ := fs.Glob(root, strings.TrimPrefix(pattern, "/"))
	return m
}

// Warnings lists each daemon whose maximum slew exceeds rho (a fraction,
// lease.clock_rate_error), in words fit for the start-up log.
func Warnings(ds []Daemon, rho float64) []string {
	var out []string
	for _, d := range ds {
		if d.MaxSlew/1e6 > rho {
			out = append(out, fmt.Sprintf("%s may slew the clock by %.0f ppm (%s, %s), more than lease.clock_rate_error %g (%.0f ppm): "+
				"etcd times leases on the slewed clock, so a lease can lapse up to that much early; set maxslewrate at most %.0f in %s, or raise lease.clock_rate_error",
				d.Name, d.MaxSlew, d.Why, d.File, rho, rho*1e6, rho*1e6, d.File))
		}
	}
	return out
}
