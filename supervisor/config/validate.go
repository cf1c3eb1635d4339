package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// Validate checks every rule Load applies except the permission of the
// configuration file itself, which only Load sees. It reads the files the
// configuration names (TLS, password). A refusal is a *Error whose File is
// c.Path.
func (c Config) Validate() error { return c.check(nil) }

// rule checks one aspect of a configuration; nil means fine.
type rule func(c Config) *Error

// rules run in this order and the first refusal wins: first the values on
// their own, then the relations between them, then the files they name.
var rules = []rule{
	checkProfile,
	checkNames,
	checkEtcd,
	checkLease,
	checkUnits,
	checkTiming,
	checkGuard,
	checkLog,
	checkHTTP,
	checkHooks,
	checkHistory,
	checkTLSFiles,
	checkPasswordFile,
	checkAPIFence,
	checkEtcdFence,
	checkHealth,
	// Last: a file with a plain mistake gets that named first; this one
	// weighs the whole timing against the etcd the profile assumes.
	checkStall,
}

func (c Config) check(d *document) error {
	file := c.Path
	if d != nil {
		file = d.file
	}
	if file == "" {
		file = "(configuration built in code)"
	}
	for _, r := range rules {
		if e := r(c); e != nil {
			e.File = file
			if e.Line == 0 {
				e.Line = d.lineOf(e.Key)
			}
			if len(e.Related) > 0 {
				e.Msg += "; " + c.relation(d, e.Related)
			}
			return e
		}
	}
	return nil
}

// refuse makes an *Error about key, quoting its effective value.
func refuse(c Config, key, format string, args ...any) *Error {
	return &Error{Key: key, Value: fieldText(c, key), Msg: fmt.Sprintf(format, args...)}
}

// fieldText is the effective value of a schema key as TOML text.
func fieldText(c Config, key string) string {
	n := lookupKey(key)
	if n == nil || n.kind == kindTable {
		return ""
	}
	return truncate(renderField(reflect.ValueOf(c).FieldByIndex(n.index)))
}

// --- names -----------------------------------------------------------------

func checkNames(c Config) *Error {
	if msg := nameProblem(c.Node); msg != "" {
		return refuse(c, "node", "%s", msg)
	}
	if msg := nameProblem(c.Cluster); msg != "" {
		return refuse(c, "cluster", "%s", msg)
	}
	seen := map[string]bool{}
	for _, p := range c.Peers {
		if msg := nameProblem(p); msg != "" {
			return refuse(c, "peers", "peer %q %s", p, msg)
		}
		if seen[p] {
			return refuse(c, "peers", "lists %q twice", p)
		}
		seen[p] = true
	}
	return nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// nameProblem accepts a DNS-1123 subdomain (lower-case labels joined by
// dots, like a Kubernetes node name or an FQDN): it is used verbatim as an
// etcd key component and in the guard's messages, so no '/', no spaces, no
// upper case.
func nameProblem(s string) string {
	const rule = "must be a DNS-1123 name: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > 253:
		return "longer than 253 characters; " + rule
	}
	for label := range strings.SplitSeq(s, ".") {
		if !dnsLabel.MatchString(label) {
			return rule
		}
	}
	return ""
}

// --- etcd ------------------------------------------------------------------

var prefixRe = regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)

func checkEtcd(c Config) *Error {
	e := c.Etcd
	if len(e.Endpoints) == 0 {
		return refuse(c, "etcd.endpoints", `must list at least one etcd endpoint, e.g. ["https://10.0.0.11:2379"]`)
	}
	seen := map[string]bool{}
	for i, ep := range e.Endpoints {
		if msg := endpointProblem(ep); msg != "" {
			return &Error{Key: "etcd.endpoints", Value: truncate(quote(ep)), Msg: fmt.Sprintf("entry %d: %s", i+1, msg)}
		}
		if seen[ep] {
			return &Error{Key: "etcd.endpoints", Value: truncate(quote(ep)), Msg: fmt.Sprintf("entry %d: listed twice", i+1)}
		}
		seen[ep] = true
	}
	if !prefixRe.MatchString(e.Prefix) {
		return refuse(c, "etcd.prefix", `must be an absolute key path such as "/kha-supervisor": '/'-separated non-empty parts of letters, digits, '.', '_' and '-', no trailing '/'`)
	}
	for _, f := range []struct{ key, path string }{
		{"etcd.ca", e.CA}, {"etcd.cert", e.Cert}, {"etcd.key", e.Key}, {"etcd.password_file", e.PasswordFile},
	} {
		if f.path != "" && !filepath.IsAbs(f.path) {
			return refuse(c, f.key, "must be an absolute path")
		}
	}
	switch {
	case e.Cert != "" && e.Key == "":
		return refuse(c, "etcd.cert", "is set but etcd.key is not; a client certificate needs its key")
	case e.Key != "" && e.Cert == "":
		return refuse(c, "etcd.key", "is set but etcd.cert is not; a client key needs its certificate")
	case e.PasswordFile != "" && e.Username == "":
		return refuse(c, "etcd.password_file", "is set but etcd.username is not")
	case e.Username != "" && e.PasswordFile == "":
		return refuse(c, "etcd.username", "is set but etcd.password_file is not (the password is only read from a file)")
	}
	if err := positive(c, "etcd.dial_timeout"); err != nil {
		return err
	}
	return positive(c, "etcd.request_timeout")
}

func endpointProblem(ep string) string {
	const example = `, e.g. "https://10.0.0.11:2379"`
	u, err := url.Parse(ep)
	if err != nil {
		return "not a URL" + example
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "scheme must be http or https" + example
	case u.Opaque != "" || u.Host == "":
		return "missing host:port" + example
	case u.User != nil:
		return "must not carry credentials; use etcd.username and etcd.password_file"
	case u.Hostname() == "":
		return "missing host" + example
	case u.Port() == "":
		return "missing port (etcd clients usually use 2379)" + example
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "must be scheme://host:port with no path, query or fragment"
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return "port must be 1-65535"
	}
	return ""
}

// --- durations -------------------------------------------------------------

func duration(c Config, key string) time.Duration {
	return reflect.ValueOf(c).FieldByIndex(lookupKey(key).index).Interface().(time.Duration)
}

func positive(c Config, key string) *Error {
	if duration(c, key) <= 0 {
		return refuse(c, key, "must be a positive duration")
	}
	return nil
}

func nonNegative(c Config, key string) *Error {
	if duration(c, key) < 0 {
		return refuse(c, key, "must not be negative")
	}
	return nil
}

func checkLease(c Config) *Error {
	for _, k := range []string{"lease.ttl", "lease.renew_interval"} {
		if err := positive(c, k); err != nil {
			return err
		}
	}
	if c.Lease.TTL%time.Second != 0 {
		return refuse(c, "lease.ttl", "must be a whole number of seconds: etcd grants lease TTLs in seconds")
	}
	if r := c.Lease.ClockRate; math.IsNaN(r) || r < 0 || r >= 0.5 {
		return refuse(c, "lease.clock_rate_error", "must be a fraction in [0, 0.5), e.g. 0.01 for clocks that may run 1%% fast")
	}
	for _, k := range []string{"lease.slack", "lease.takeover_delay"} {
		if err := nonNegative(c, k); err != nil {
			return err
		}
	}
	return nil
}

// --- units -----------------------------------------------------------------

// self is the supervisor's own unit: managing it would stop the supervisor.
const self = layout.SupervisorUnit

func checkUnits(c Config) *Error {
	u := c.Units
	if len(u.Managed) == 0 {
		return refuse(c, "units.managed", `must list at least one unit, e.g. ["kube-controller-manager.service", "kube-scheduler.service"]`)
	}
	seen := map[string]bool{}
	for i, name := range u.Managed {
		bad := func(msg string) *Error {
			return &Error{Key: "units.managed", Value: truncate(quote(name)), Msg: fmt.Sprintf("entry %d: %s", i+1, msg)}
		}
		if msg := unitNameProblem(name); msg != "" {
			return bad(msg)
		}
		if name == self {
			return bad("is the supervisor's own unit")
		}
		if seen[name] {
			return bad("listed twice")
		}
		seen[name] = true
	}
	for _, k := range []string{"units.start_timeout", "units.stop_timeout", "units.kill_grace", "units.poll_interval", "units.failure_window"} {
		if err := positive(c, k); err != nil {
			return err
		}
	}
	if u.FailureThreshold < 1 {
		return refuse(c, "units.failure_threshold", "must be at least 1")
	}
	if err := checkStray(c); err != nil {
		return err
	}
	return nonNegative(c, "units.cooldown")
}

func checkStray(c Config) *Error {
	u := c.Units
	if u.StrayPolicy != StrayKill && u.StrayPolicy != StrayReport {
		return refuse(c, "units.stray_policy", `must be "kill" or "report"`)
	}
	for i, p := range u.Processes {
		if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
			return &Error{Key: "units.processes", Value: truncate(quote(p)), Msg: fmt.Sprintf("entry %d: must be the absolute path of an executable, e.g. \"/usr/local/bin/kube-scheduler\"", i+1)}
		}
	}
	return nil
}

// unitTypes are systemd's unit suffixes, to tell "not a service" from "not
// a unit name at all".
var unitTypes = []string{"service", "socket", "target", "device", "mount", "automount", "swap", "timer", "path", "slice", "scope"}

// unitNameProblem applies systemd's unit name grammar (unit_name_is_valid:
// at most 255 bytes, prefix[@instance].type, characters from
// [A-Za-z0-9:_.\-] plus '@', no empty prefix) and then this project's rule
// that a managed unit is a service instance or plain service: only a service
// runs the ExecStartPre= guard, and a template cannot be started.
func unitNameProblem(name string) string {
	const example = `, e.g. "kube-scheduler.service"`
	if name == "" {
		return "empty unit name"
	}
	if len(name) > 255 {
		return "unit name longer than 255 bytes"
	}
	dot := strings.LastIndexByte(name, '.')
	if dot <= 0 {
		return "not a unit name: missing the .service suffix" + example
	}
	for _, r := range name[:dot] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":-_.\\@", r)) {
			return fmt.Sprintf("not a unit name: %q is not allowed (letters, digits, ':', '-', '_', '.', '\\' and '@')", r)
		}
	}
	if name[0] == '@' {
		return "not a unit name: empty name before '@'"
	}
	suffix := name[dot+1:]
	if suffix != "service" {
		for _, t := range unitTypes {
			if suffix == t {
				return "managed units must be services (.service): only a service runs the ExecStartPre= guard"
			}
		}
		return fmt.Sprintf("not a unit name: unknown unit type %q%s", suffix, example)
	}
	if at := strings.IndexByte(name, '@'); at == dot-1 {
		return `is a template and cannot be started; name an instance, e.g. "foo@bar.service"`
	}
	return ""
}

// --- timing relations ------------------------------------------------------

func checkTiming(c Config) *Error {
	renew := c.Lease.RenewInterval
	if c.Etcd.RequestTimeout > renew {
		e := refuse(c, "etcd.request_timeout",
			"must not exceed lease.renew_interval (%s): a renewal still waiting when the next is due delays every later one", renew)
		e.Related = []string{"etcd.request_timeout", "lease.renew_interval"}
		return e
	}
	w := c.Window()
	// The same inequality in float64 seconds, which cannot overflow: with
	// durations near the int64 limit the time.Duration arithmetic wraps around,
	// and a wrapped window must not pass for a large one.
	spanF := w.TTL.Seconds()*(1-w.ClockRate) - c.Units.StopTimeout.Seconds() - c.Units.KillGrace.Seconds() - w.Slack.Seconds()
	err := w.Validate(renew)
	if err == nil && spanF < 2*renew.Seconds() {
		err = fmt.Errorf("fence window %.3fs is under two renew intervals (2 x %s)", spanF, renew)
	}
	if err != nil {
		e := refuse(c, "lease.ttl",
			"fence window %s is under two renew intervals (2 * lease.renew_interval %s = %s): "+
				"window = lease.ttl %s * (1 - lease.clock_rate_error %g) - S_max %s (units.stop_timeout %s + units.kill_grace %s) - lease.slack %s; "+
				"raise lease.ttl or lower the others",
			exact(w.Span(w.TTL), spanF), renew, exact(2*renew, 2*renew.Seconds()),
			w.TTL, w.ClockRate, exact(w.StopMax, c.Units.StopTimeout.Seconds()+c.Units.KillGrace.Seconds()),
			c.Units.StopTimeout, c.Units.KillGrace, w.Slack)
		e.Err = err
		e.Related = windowKeys
		return e
	}
	return nil
}

// windowKeys are the keys the fence window is made of.
var windowKeys = []string{"lease.ttl", "lease.renew_interval", "lease.clock_rate_error", "units.stop_timeout", "units.kill_grace", "lease.slack"}

// exact prints d, or the float64 seconds f when d has wrapped around (they
// then differ by far more than rounding).
func exact(d time.Duration, f float64) string {
	if math.Abs(d.Seconds()-f) > 1 {
		return strconv.FormatFloat(f, 'g', 4, 64) + "s"
	}
	return d.String()
}

// --- local endpoints -------------------------------------------------------

// maxSocketPath is sun_path's size minus the terminating NUL on Linux.
const maxSocketPath = 107

func checkGuard(c Config) *Error {
	s := c.Guard.Socket
	switch {
	case s == "":
		return refuse(c, "guard.socket", "must be set: the managed units' ExecStartPre= guard asks the supervisor here")
	case !filepath.IsAbs(s):
		return refuse(c, "guard.socket", "must be an absolute path")
	case len(s) > maxSocketPath:
		return refuse(c, "guard.socket", "longer than %d bytes, the limit for a unix socket path", maxSocketPath)
	}
	return nil
}

func checkLog(c Config) *Error {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return refuse(c, "log.level", "must be one of debug, info, warn, error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return refuse(c, "log.format", "must be text or json")
	}
	return nil
}

func checkHTTP(c Config) *Error {
	if c.HTTP.Listen == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(c.HTTP.Listen)
	if err != nil {
		return refuse(c, "http.listen", `must be host:port, e.g. "127.0.0.1:9731" or ":9731" (empty disables the endpoint)`)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return refuse(c, "http.listen", "port must be a number 1-65535")
	}
	return nil
}

func checkHooks(c Config) *Error {
	for _, h := range []struct {
		key  string
		argv []string
	}{{"hooks.on_promote", c.Hooks.OnPromote}, {"hooks.on_demote", c.Hooks.OnDemote}, {"hooks.on_fence", c.Hooks.OnFence}} {
		if len(h.argv) == 0 {
			continue
		}
		if !filepath.IsAbs(h.argv[0]) {
			return refuse(c, h.key, "the program (first element) must be an absolute path: hooks run as argv, never through a shell or $PATH")
		}
		for i, a := range h.argv {
			if strings.ContainsRune(a, 0) {
				return refuse(c, h.key, "element %d contains a NUL byte", i+1)
			}
		}
	}
	return positive(c, "hooks.timeout")
}

func checkHistory(c Config) *Error {
	if c.History.Retain < 1 {
		return refuse(c, "history.retain", "must be at least 1")
	}
	return nil
}

// --- files the configuration names ----------------------------------------

func unreadable(c Config, key string, err error) *Error {
	e := refuse(c, key, "cannot read: %s", describeIOErr(err))
	e.Err = err
	return e
}

func worldReadable(m fs.FileMode) bool { return m.Perm()&0o004 != 0 }

func checkTLSFiles(c Config) *Error {
	e := c.Etcd
	if e.CA != "" {
		pem, _, err := readLimited(e.CA)
		if err != nil {
			return unreadable(c, "etcd.ca", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return refuse(c, "etcd.ca", "holds no PEM certificate")
		}
	}
	if e.Cert == "" {
		return nil // checkEtcd made sure key is empty too
	}
	cert, _, err := readLimited(e.Cert)
	if err != nil {
		return unreadable(c, "etcd.cert", err)
	}
	key, info, err := readLimited(e.Key)
	if err != nil {
		return unreadable(c, "etcd.key", err)
	}
	if worldReadable(info.Mode()) {
		return refuse(c, "etcd.key", "the private key file is world-readable (mode %04o); chmod o-r %s", info.Mode().Perm(), e.Key)
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		r := refuse(c, "etcd.key", "not a usable PEM certificate and key pair with etcd.cert: %v", err)
		r.Err = err
		return r
	}
	return nil
}

func checkPasswordFile(c Config) *Error {
	p := c.Etcd.PasswordFile
	if p == "" {
		return nil
	}
	data, info, err := readLimited(p)
	if err != nil {
		return unreadable(c, "etcd.password_file", err)
	}
	if worldReadable(info.Mode()) {
		return refuse(c, "etcd.password_file", "the password file is world-readable (mode %04o); chmod o-r %s", info.Mode().Perm(), p)
	}
	if trimPassword(data) == "" {
		return refuse(c, "etcd.password_file", "the password file is empty")
	}
	return nil
}

// checkMainFileMode refuses a world-readable configuration file that names a
// secret. The file holds no secret itself (there is no inline password key),
// but one that says where the etcd password and client key live, and that a
// local user may read, is a map to them, and a sign that the secrets' own
// permissions were set with the same care. The rule is deliberately simple:
// world-readable (mode & 0o004) plus etcd.password_file or etcd.key set.
func checkMainFileMode(file string, mode fs.FileMode, c Config, d *document) *Error {
	if !worldReadable(mode) {
		return nil
	}
	key := ""
	switch {
	case c.Etcd.PasswordFile != "":
		key = "etcd.password_file"
	case c.Etcd.Key != "":
		key = "etcd.key"
	default:
		return nil
	}
	e := refuse(c, key, "the configuration file is world-readable (mode %04o) and names a secret file; chmod o-r %s",
		mode.Perm(), file)
	e.File = file
	e.Line = d.lineOf(key)
	return e
}
