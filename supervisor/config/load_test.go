package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// refusal is one file Load must refuse, and what the refusal must name.
type refusal struct {
	name  string
	toml  func(t testing.TB, dir string, p pki) string // file content; may create files in dir
	mode  os.FileMode                                  // of the config file; 0 means 0600
	key   string                                       // want Error.Key
	value string                                       // want Error.Value (exact; also in the message)
	line  int                                          // want Error.Line; -1 means "no line" (0)
	msg   []string                                     // substrings the message must contain
}

func text(s string) func(testing.TB, string, pki) string {
	return func(testing.TB, string, pki) string { return s }
}

func refusals() []refusal {
	return []refusal{
		// Strict decoding.
		{name: "unknown top-level key", toml: text("nodes = \"m1\"\n"),
			key: "nodes", value: `"m1"`, line: 1, msg: []string{"unknown key", `did you mean "node"?`}},
		{name: "unknown key far from every key", toml: text("colour = \"blue\"\n"),
			key: "colour", value: `"blue"`, line: 1, msg: []string{"unknown key", "node, cluster"}},
		{name: "mistyped key", toml: text("[lease]\nslak = \"1s\"\n"),
			key: "lease.slak", value: `"1s"`, line: 2, msg: []string{`unknown key in [lease]; did you mean "slack"?`}},
		{name: "mistyped table", toml: text("[unit]\nmanaged = [\"a.service\"]\n"),
			key: "unit", line: 1, msg: []string{`unknown key at the top level; did you mean "units"?`}},
		{name: "unknown key in a table", toml: text("[lease]\nttl = \"10s\"\nttll = \"5s\"\n"),
			key: "lease.ttll", value: `"5s"`, line: 3, msg: []string{"unknown key", "in [lease]"}},
		{name: "unknown table", toml: text("# comment\n[leases]\nttl = \"10s\"\n"),
			key: "leases", line: 2, msg: []string{"unknown key"}},
		{name: "wrong case", toml: text("[Lease]\nttl = \"10s\"\n"),
			key: "Lease", line: 1, msg: []string{`did you mean "lease"`, "case-sensitive"}},
		{name: "unknown key in an inline table", toml: text("etcd = { endpoint = \"https://a:2379\" }\n"),
			key: "etcd.endpoint", value: `"https://a:2379"`, line: 1, msg: []string{"unknown key"}},
		{name: "duration as integer", toml: text("[lease]\n\nttl = 10\n"),
			key: "lease.ttl", value: "10", line: 3, msg: []string{"wrong type", `"10s"`, "integer"}},
		{name: "string as integer", toml: text("cluster = 5\n"),
			key: "cluster", value: "5", line: 1, msg: []string{"wrong type", "want a string"}},
		{name: "list as string", toml: text("[units]\nmanaged = \"kube-scheduler.service\"\n"),
			key: "units.managed", value: `"kube-scheduler.service"`, line: 2, msg: []string{"array of strings"}},
		{name: "list entry not a string", toml: text("[units]\nmanaged = [\"a.service\", 3]\n"),
			key: "units.managed", value: `["a.service", 3]`, line: 2, msg: []string{"entry 2", "integer"}},
		{name: "integer as string", toml: text("[units]\nfailure_threshold = \"3\"\n"),
			key: "units.failure_threshold", value: `"3"`, line: 2, msg: []string{"want an integer"}},
		{name: "bool as string", toml: text("[hooks]\nabort_on_promote_failure = \"yes\"\n"),
			key: "hooks.abort_on_promote_failure", value: `"yes"`, line: 2, msg: []string{"true or false"}},
		{name: "float as string", toml: text("[lease]\nclock_rate_error = \"1%\"\n"),
			key: "lease.clock_rate_error", value: `"1%"`, line: 2, msg: []string{"want a number"}},
		{name: "table as leaf", toml: text("[units.managed]\nx = 1\n"),
			key: "units.managed", value: "{x = 1}", line: 1, msg: []string{"wrong type", "table"}},
		{name: "leaf as table", toml: text("[etcd]\nendpoints.x = \"a\"\n"),
			key: "etcd.endpoints", value: `{x = "a"}`, line: 2, msg: []string{"wrong type"}},
		{name: "section as value", toml: text("lease = \"10s\"\n"),
			key: "lease", value: `"10s"`, line: 1, msg: []string{"want a table", "string"}},
		{name: "section as array of tables", toml: text("[[lease]]\nttl = \"10s\"\n"),
			key: "lease", line: 1, msg: []string{"want a table", "array of tables"}},
		{name: "bad duration", toml: text("[lease]\nrenew_interval = \"1 second\"\n"),
			key: "lease.renew_interval", value: `"1 second"`, line: 2, msg: []string{"not a duration", `"1.5s"`}},
		{name: "duration without unit", toml: text("[units]\nstop_timeout = \"2\"\n"),
			key: "units.stop_timeout", value: `"2"`, line: 2, msg: []string{"not a duration"}},
		{name: "syntax error", toml: text("node = \"m1\"\n[lease\nttl = \"10s\"\n"),
			line: 2, msg: []string{"TOML syntax"}},
		{name: "duplicate key", toml: text("node = \"m1\"\nnode = \"m2\"\n"),
			line: 2, msg: []string{"TOML syntax", "already"}},
		{name: "invalid UTF-8", toml: text("node = \"m\xff1\"\n"),
			line: 1, msg: []string{"TOML syntax", "UTF-8"}},

		// Values.
		{name: "negative slack", toml: text("[lease]\nslack = \"-1s\"\n"),
			key: "lease.slack", value: `"-1s"`, line: 2, msg: []string{"must not be negative"}},
		{name: "negative takeover delay", toml: text("[lease]\ntakeover_delay = \"-2s\"\n"),
			key: "lease.takeover_delay", value: `"-2s"`, line: 2, msg: []string{"must not be negative"}},
		{name: "negative cooldown", toml: text("[units]\ncooldown = \"-1m\"\n"),
			key: "units.cooldown", value: `"-1m0s"`, line: 2, msg: []string{"must not be negative"}},
		{name: "zero ttl", toml: text("[lease]\nttl = \"0s\"\n"),
			key: "lease.ttl", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "fractional ttl", toml: text("[lease]\nttl = \"10500ms\"\n"),
			key: "lease.ttl", value: `"10.5s"`, line: 2, msg: []string{"whole number of seconds"}},
		{name: "zero renew interval", toml: text("[lease]\nrenew_interval = \"0s\"\n"),
			key: "lease.renew_interval", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "clock rate too large", toml: text("[lease]\nclock_rate_error = 0.5\n"),
			key: "lease.clock_rate_error", value: "0.5", line: 2, msg: []string{"[0, 0.5)"}},
		{name: "clock rate negative", toml: text("[lease]\nclock_rate_error = -0.01\n"),
			key: "lease.clock_rate_error", value: "-0.01", line: 2, msg: []string{"[0, 0.5)"}},
		{name: "clock rate nan", toml: text("[lease]\nclock_rate_error = nan\n"),
			key: "lease.clock_rate_error", value: "nan", line: 2, msg: []string{"[0, 0.5)"}},
		{name: "zero dial timeout", toml: text("[etcd]\ndial_timeout = \"0s\"\n"),
			key: "etcd.dial_timeout", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero request timeout", toml: text("[etcd]\nrequest_timeout = \"0s\"\n"),
			key: "etcd.request_timeout", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero start timeout", toml: text("[units]\nstart_timeout = \"0s\"\n"),
			key: "units.start_timeout", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero stop timeout", toml: text("[units]\nstop_timeout = \"0s\"\n"),
			key: "units.stop_timeout", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero kill grace", toml: text("[units]\nkill_grace = \"0s\"\n"),
			key: "units.kill_grace", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero poll interval", toml: text("[units]\npoll_interval = \"0s\"\n"),
			key: "units.poll_interval", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero failure window", toml: text("[units]\nfailure_window = \"0s\"\n"),
			key: "units.failure_window", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "zero failure threshold", toml: text("[units]\nfailure_threshold = 0\n"),
			key: "units.failure_threshold", value: "0", line: 2, msg: []string{"at least 1"}},
		{name: "stray policy", toml: text("[units]\nstray_policy = \"ignore\"\n"),
			key: "units.stray_policy", value: `"ignore"`, line: 2, msg: []string{`"kill" or "report"`}},
		{name: "exec watch not a boolean", toml: text("[units]\nexec_watch = \"yes\"\n"),
			key: "units.exec_watch", value: `"yes"`, line: 2, msg: []string{"wrong type", "want true or false"}},
		{name: "relative process", toml: text("[units]\nprocesses = [\"kube-scheduler\"]\n"),
			key: "units.processes", value: `"kube-scheduler"`, line: 2, msg: []string{"absolute path"}},
		{name: "zero history", toml: text("[history]\nretain = 0\n"),
			key: "history.retain", value: "0", line: 2, msg: []string{"at least 1"}},
		{name: "log level", toml: text("[log]\nlevel = \"verbose\"\n"),
			key: "log.level", value: `"verbose"`, line: 2, msg: []string{"debug, info, warn, error"}},
		{name: "log format", toml: text("[log]\nformat = \"xml\"\n"),
			key: "log.format", value: `"xml"`, line: 2, msg: []string{"text or json"}},

		// Names.
		{name: "node upper case", toml: text("node = \"M1\"\n"),
			key: "node", value: `"M1"`, line: 1, msg: []string{"DNS-1123"}},
		{name: "node with slash", toml: text("node = \"m1/x\"\n"),
			key: "node", value: `"m1/x"`, line: 1, msg: []string{"DNS-1123"}},
		{name: "cluster with space", toml: text("cluster = \"kube control\"\n"),
			key: "cluster", value: `"kube control"`, line: 1, msg: []string{"DNS-1123"}},
		{name: "cluster empty", toml: text("cluster = \"\"\n"),
			key: "cluster", value: `""`, line: 1, msg: []string{"must not be empty"}},
		{name: "peer upper case", toml: text("peers = [\"m1\", \"M2\"]\n"),
			key: "peers", value: `["m1", "M2"]`, line: 1, msg: []string{`peer "M2"`, "DNS-1123"}},
		{name: "peer twice", toml: text("peers = [\"m1\", \"m2\", \"m1\"]\n"),
			key: "peers", value: `["m1", "m2", "m1"]`, line: 1, msg: []string{`lists "m1" twice`}},

		// Units.
		{name: "no units", toml: text("[units]\nmanaged = []\n"),
			key: "units.managed", value: "[]", line: 2, msg: []string{"at least one unit"}},
		{name: "unit without suffix", toml: text("[units]\nmanaged = [\"kube-scheduler\"]\n"),
			key: "units.managed", value: `"kube-scheduler"`, line: 2, msg: []string{"entry 1", ".service"}},
		{name: "unit not a service", toml: text("[units]\nmanaged = [\"a.service\", \"kube-scheduler.timer\"]\n"),
			key: "units.managed", value: `"kube-scheduler.timer"`, line: 2, msg: []string{"entry 2", "must be services"}},
		{name: "unit unknown type", toml: text("[units]\nmanaged = [\"kube-scheduler.servic\"]\n"),
			key: "units.managed", value: `"kube-scheduler.servic"`, line: 2, msg: []string{"unknown unit type"}},
		{name: "unit bad character", toml: text("[units]\nmanaged = [\"kube scheduler.service\"]\n"),
			key: "units.managed", value: `"kube scheduler.service"`, line: 2, msg: []string{"not a unit name", "' '"}},
		{name: "unit template", toml: text("[units]\nmanaged = [\"witness@.service\"]\n"),
			key: "units.managed", value: `"witness@.service"`, line: 2, msg: []string{"template"}},
		{name: "unit empty prefix", toml: text("[units]\nmanaged = [\"@x.service\"]\n"),
			key: "units.managed", value: `"@x.service"`, line: 2, msg: []string{"empty name before '@'"}},
		{name: "unit too long", toml: text("[units]\nmanaged = [\"" + strings.Repeat("a", 248) + ".service\"]\n"),
			key: "units.managed", line: 2, msg: []string{"longer than 255"}},
		{name: "unit twice", toml: text("[units]\nmanaged = [\"a.service\", \"b.service\", \"a.service\"]\n"),
			key: "units.managed", value: `"a.service"`, line: 2, msg: []string{"entry 3", "listed twice"}},
		{name: "unit is the supervisor", toml: text("[units]\nmanaged = [\"kha-supervisor.service\"]\n"),
			key: "units.managed", value: `"kha-supervisor.service"`, line: 2, msg: []string{"supervisor's own unit"}},

		// etcd.
		{name: "no endpoints", toml: text("[etcd]\nendpoints = []\n"),
			key: "etcd.endpoints", value: "[]", line: 2, msg: []string{"at least one"}},
		{name: "endpoint without scheme", toml: text("[etcd]\nendpoints = [\"10.0.0.1:2379\"]\n"),
			key: "etcd.endpoints", value: `"10.0.0.1:2379"`, line: 2, msg: []string{"entry 1"}},
		{name: "endpoint bad scheme", toml: text("[etcd]\nendpoints = [\"https://a:2379\", \"ftp://b:2379\"]\n"),
			key: "etcd.endpoints", value: `"ftp://b:2379"`, line: 2, msg: []string{"entry 2", "http or https"}},
		{name: "endpoint without port", toml: text("[etcd]\nendpoints = [\"https://10.0.0.1\"]\n"),
			key: "etcd.endpoints", value: `"https://10.0.0.1"`, line: 2, msg: []string{"missing port"}},
		{name: "endpoint port range", toml: text("[etcd]\nendpoints = [\"https://10.0.0.1:99999\"]\n"),
			key: "etcd.endpoints", value: `"https://10.0.0.1:99999"`, line: 2, msg: []string{"1-65535"}},
		{name: "endpoint with path", toml: text("[etcd]\nendpoints = [\"https://10.0.0.1:2379/v3\"]\n"),
			key: "etcd.endpoints", value: `"https://10.0.0.1:2379/v3"`, line: 2, msg: []string{"no path"}},
		{name: "endpoint with credentials", toml: text("[etcd]\nendpoints = [\"https://u:p@10.0.0.1:2379\"]\n"),
			key: "etcd.endpoints", value: `"https://u:p@10.0.0.1:2379"`, line: 2, msg: []string{"credentials"}},
		{name: "endpoint twice", toml: text("[etcd]\nendpoints = [\"https://a:2379\", \"https://a:2379\"]\n"),
			key: "etcd.endpoints", value: `"https://a:2379"`, line: 2, msg: []string{"listed twice"}},
		{name: "endpoint garbage", toml: text("[etcd]\nendpoints = [\"https://[::1\"]\n"),
			key: "etcd.endpoints", value: `"https://[::1"`, line: 2, msg: []string{"not a URL"}},
		{name: "relative prefix", toml: text("[etcd]\nprefix = \"kha\"\n"),
			key: "etcd.prefix", value: `"kha"`, line: 2, msg: []string{"absolute key path"}},
		{name: "prefix trailing slash", toml: text("[etcd]\nprefix = \"/kha/\"\n"),
			key: "etcd.prefix", value: `"/kha/"`, line: 2, msg: []string{"no trailing '/'"}},

		// TLS files.
		{name: "relative ca", toml: text("[etcd]\nca = \"ca.crt\"\n"),
			key: "etcd.ca", value: `"ca.crt"`, line: 2, msg: []string{"absolute path"}},
		{name: "missing ca", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nca = " + quote(filepath.Join(dir, "nope.crt")) + "\n"
		}, key: "etcd.ca", line: 2, msg: []string{"cannot read", "no such file"}},
		{name: "ca is a directory", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nca = " + quote(dir) + "\n"
		}, key: "etcd.ca", value: quote("DIR"), line: 2, msg: []string{"is a directory, not a regular file"}},
		{name: "ca is not PEM", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nca = " + quote(writeFile(t, dir, "junk.crt", "hello\n", 0o644)) + "\n"
		}, key: "etcd.ca", line: 2, msg: []string{"no PEM certificate"}},
		{name: "cert without key", toml: func(_ testing.TB, _ string, p pki) string {
			return "[etcd]\ncert = " + quote(p.cert) + "\n"
		}, key: "etcd.cert", line: 2, msg: []string{"etcd.key is not"}},
		{name: "key without cert", toml: func(_ testing.TB, _ string, p pki) string {
			return "[etcd]\nkey = " + quote(p.key) + "\n"
		}, key: "etcd.key", line: 2, msg: []string{"etcd.cert is not"}},
		{name: "missing key", toml: func(t testing.TB, dir string, p pki) string {
			return "[etcd]\ncert = " + quote(p.cert) + "\nkey = " + quote(filepath.Join(dir, "gone.key")) + "\n"
		}, key: "etcd.key", line: 3, msg: []string{"cannot read"}},
		{name: "missing cert", toml: func(t testing.TB, dir string, p pki) string {
			return "[etcd]\ncert = " + quote(filepath.Join(dir, "gone.crt")) + "\nkey = " + quote(p.key) + "\n"
		}, key: "etcd.cert", line: 2, msg: []string{"cannot read"}},
		{name: "key and cert do not match", toml: func(_ testing.TB, _ string, p pki) string {
			return "[etcd]\ncert = " + quote(p.cert) + "\nkey = " + quote(p.otherKey) + "\n"
		}, key: "etcd.key", line: 3, msg: []string{"not a usable PEM certificate and key pair"}},
		{name: "world-readable key", toml: func(t testing.TB, dir string, p pki) string {
			k := filepath.Join(dir, "client.key")
			if err := os.Chmod(k, 0o644); err != nil {
				t.Fatal(err)
			}
			return "[etcd]\ncert = " + quote(p.cert) + "\nkey = " + quote(k) + "\n"
		}, key: "etcd.key", line: 3, msg: []string{"world-readable", "0644"}},

		// Password.
		{name: "password file without user", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\npassword_file = " + quote(writeFile(t, dir, "pw", "s3cret\n", 0o600)) + "\n"
		}, key: "etcd.password_file", line: 2, msg: []string{"etcd.username is not"}},
		{name: "user without password file", toml: text("[etcd]\nusername = \"root\"\n"),
			key: "etcd.username", value: `"root"`, line: 2, msg: []string{"etcd.password_file is not"}},
		{name: "relative password file", toml: text("[etcd]\nusername = \"root\"\npassword_file = \"pw\"\n"),
			key: "etcd.password_file", value: `"pw"`, line: 3, msg: []string{"absolute path"}},
		{name: "missing password file", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nusername = \"root\"\npassword_file = " + quote(filepath.Join(dir, "nope")) + "\n"
		}, key: "etcd.password_file", line: 3, msg: []string{"cannot read", "no such file"}},
		{name: "world-readable password file", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nusername = \"root\"\npassword_file = " + quote(writeFile(t, dir, "pw", "s3cret\n", 0o644)) + "\n"
		}, key: "etcd.password_file", line: 3, msg: []string{"world-readable", "0644"}},
		{name: "empty password file", toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nusername = \"root\"\npassword_file = " + quote(writeFile(t, dir, "pw", "\n", 0o600)) + "\n"
		}, key: "etcd.password_file", line: 3, msg: []string{"empty"}},
		{name: "world-readable config naming a password file", mode: 0o644, toml: func(t testing.TB, dir string, _ pki) string {
			return "[etcd]\nusername = \"root\"\npassword_file = " + quote(writeFile(t, dir, "pw", "s3cret\n", 0o600)) + "\n"
		}, key: "etcd.password_file", line: 3, msg: []string{"configuration file is world-readable", "0644"}},
		{name: "world-readable config naming a key", mode: 0o604, toml: func(_ testing.TB, _ string, p pki) string {
			return "[etcd]\ncert = " + quote(p.cert) + "\nkey = " + quote(p.key) + "\n"
		}, key: "etcd.key", line: 3, msg: []string{"configuration file is world-readable", "0604"}},

		// Timing relations.
		{name: "request timeout over renew interval", toml: text("[etcd]\nrequest_timeout = \"1500ms\"\n"),
			key: "etcd.request_timeout", value: `"1.5s"`, line: 2, msg: []string{"lease.renew_interval (1s)",
				`the keys: etcd.request_timeout = "1.5s" (line 2), lease.renew_interval = "1s" (from profile "default")`}},
		{name: "fence window too small", toml: text("[lease]\nttl = \"4s\"\n"),
			key: "lease.ttl", value: `"4s"`, line: 2,
			msg: []string{"fence window 460ms", "2 * lease.renew_interval 1s = 2s", "lease.ttl 4s * (1 - lease.clock_rate_error 0.01)",
				"S_max 3s (units.stop_timeout 2s + units.kill_grace 1s)", "lease.slack 500ms"}},
		{name: "fence window too small from renew interval", toml: text("[lease]\nrenew_interval = \"4s\"\n[etcd]\nrequest_timeout = \"1s\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"fence window 6.4s", "2 * lease.renew_interval 4s = 8s",
				`the keys: lease.ttl = "10s" (from profile "default"), lease.renew_interval = "4s" (line 2), lease.clock_rate_error = 0.01 (default)`}},
		{name: "fence window too small from stop timeout", toml: text("node = \"m1\"\n[units]\nstop_timeout = \"8s\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"is under two renew intervals", `units.stop_timeout = "8s" (line 3)`, `units.kill_grace = "1s" (from profile "default")`}},
		{name: "window under the etcd election the profile rides through", toml: text("profile = \"fast\"\n[lease]\nttl = \"4s\"\n"),
			key: "lease.ttl", value: `"4s"`, line: 3, msg: []string{
				"fence window 1.46s under the profile's WatchdogSec=750ms does not outlast the 3.1s without a renewal that an etcd leader election takes",
				"raise lease.ttl to at least 6s", "lease.accept_short_window = true",
				`lease.ttl = "4s" (line 3)`, `lease.renew_interval = "500ms" (from profile "fast")`, `profile = "fast" (line 1)`}},
		{name: "fast-kill window under the etcd election", toml: text("profile = \"fast-kill\"\n[lease]\nttl = \"3s\"\n"),
			key: "lease.ttl", value: `"3s"`, line: 3, msg: []string{
				"fence window 2.22s under the profile's WatchdogSec=500ms does not outlast the 2.6s", `lease.renew_interval = "250ms" (from profile "fast-kill")`,
				"raise lease.ttl to at least 4s", `units.stop_timeout = "100ms" (from profile "fast-kill")`}},
		{name: "window under the etcd election from a changed stop budget", toml: text("[units]\nstop_timeout = \"3s\"\nkill_grace = \"2s\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"fence window 2.65s under the profile's WatchdogSec=2s", "the 4.1s",
				`units.stop_timeout = "3s" (line 2)`, `units.kill_grace = "2s" (line 3)`, "at least 12s"}},
		{name: "fence window wraps around", toml: text("[units]\nstop_timeout = \"2562047h\"\nkill_grace = \"2562047h\"\n[lease]\nslack = \"2562047h\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"is under two renew intervals"}},
		{name: "renew interval wraps around", toml: text("[lease]\nrenew_interval = \"2562047h\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"is under two renew intervals"}},
		{name: "fence window negative", toml: text("[units]\nstop_timeout = \"20s\"\n"),
			key: "lease.ttl", value: `"10s"`, line: -1, msg: []string{"fence window -11.6s"}},

		// Local endpoints, hooks, watchdog.
		{name: "relative guard socket", toml: text("[guard]\nsocket = \"guard.sock\"\n"),
			key: "guard.socket", value: `"guard.sock"`, line: 2, msg: []string{"absolute path"}},
		{name: "empty guard socket", toml: text("[guard]\nsocket = \"\"\n"),
			key: "guard.socket", value: `""`, line: 2, msg: []string{"must be set"}},
		{name: "long guard socket", toml: text("[guard]\nsocket = \"/" + strings.Repeat("s", 107) + "\"\n"),
			key: "guard.socket", line: 2, msg: []string{"107 bytes"}},
		{name: "listen without port", toml: text("[http]\nlisten = \"localhost\"\n"),
			key: "http.listen", value: `"localhost"`, line: 2, msg: []string{"host:port"}},
		{name: "listen named port", toml: text("[http]\nlisten = \"127.0.0.1:http\"\n"),
			key: "http.listen", value: `"127.0.0.1:http"`, line: 2, msg: []string{"1-65535"}},
		{name: "listen port zero", toml: text("[http]\nlisten = \":0\"\n"),
			key: "http.listen", value: `":0"`, line: 2, msg: []string{"1-65535"}},
		{name: "hook relative program", toml: text("[hooks]\non_promote = [\"notify\", \"up\"]\n"),
			key: "hooks.on_promote", value: `["notify", "up"]`, line: 2, msg: []string{"absolute path", "never through a shell"}},
		{name: "hook with NUL", toml: text("[hooks]\non_fence = [\"/bin/logger\", \"a\\u0000b\"]\n"),
			key: "hooks.on_fence", value: `["/bin/logger", "a\u0000b"]`, line: 2, msg: []string{"element 2", "NUL"}},
		{name: "hook timeout zero", toml: text("[hooks]\ntimeout = \"0s\"\n"),
			key: "hooks.timeout", value: `"0s"`, line: 2, msg: []string{"positive"}},
		{name: "hardware watchdog is not offered", toml: text("[watchdog]\ndevice = \"/dev/watchdog0\"\n"),
			key: "watchdog", value: "", line: 1, msg: []string{"unknown"}},
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, tc := range refusals() {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			content := tc.toml(t, dir, newPKI(t, dir))
			mode := tc.mode
			if mode == 0 {
				mode = 0o600
			}
			path := writeFile(t, dir, "config.toml", content, mode)
			_, err := Load(path)
			e := asError(t, err)
			msg := err.Error()
			t.Logf("%s", msg)
			if e.File != path || !strings.HasPrefix(msg, path) {
				t.Errorf("File = %q, message %q; want the file %q named", e.File, msg, path)
			}
			if e.Key != tc.key {
				t.Errorf("Key = %q, want %q", e.Key, tc.key)
			}
			if tc.key != "" && !strings.Contains(msg, tc.key) {
				t.Errorf("message does not name the key %q", tc.key)
			}
			want := strings.ReplaceAll(tc.value, "DIR", dir)
			if tc.value != "" && e.Value != want {
				t.Errorf("Value = %s, want %s", e.Value, want)
			}
			if e.Value != "" && !strings.Contains(msg, e.Value) {
				t.Errorf("message does not carry the value %s", e.Value)
			}
			switch {
			case tc.line == -1 && e.Line != 0:
				t.Errorf("Line = %d, want none (the key is a default)", e.Line)
			case tc.line > 0 && e.Line != tc.line:
				t.Errorf("Line = %d, want %d", e.Line, tc.line)
			}
			for _, s := range tc.msg {
				if !strings.Contains(msg, s) {
					t.Errorf("message lacks %q", s)
				}
			}
			if strings.ContainsAny(msg, "\n\r") {
				t.Errorf("message is not one line: %q", msg)
			}
		})
	}
}

func TestLoadFileProblems(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.toml")
	big := writeFile(t, dir, "big.toml", "# "+strings.Repeat("x", maxFileSize)+"\n", 0o600)
	for _, tc := range []struct {
		name, path, msg string
		is              error
	}{
		{"missing", missing, "no such file", fs.ErrNotExist},
		{"directory", dir, "is a directory, not a regular file", nil},
		{"too large", big, "larger than", nil},
		{"device", "/dev/null", "is a device, not a regular file", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.path)
			e := asError(t, err)
			if e.File != tc.path || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v; want file %s and %q", err, tc.path, tc.msg)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("errors.Is(%v) = false", tc.is)
			}
		})
	}
	_, err := Load("")
	if e := asError(t, err); e.File == "" {
		t.Errorf("empty path: File is empty in %v", err)
	}
}

func TestLoadEmptyFileIsDefault(t *testing.T) {
	path := writeFile(t, t.TempDir(), "c.toml", "", 0o644)
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Node = hostname(t)
	want.Path = path
	want.FromProfile = ProfileKeys() // all of them, from the default profile
	if !reflect.DeepEqual(got, want) {
		t.Errorf("empty file:\n got %+v\nwant %+v", got, want)
	}
	if s := got.Window().Span(got.Lease.TTL); s != 6400*time.Millisecond {
		t.Errorf("default fence window = %s, want 6.4s (brief section 3)", s)
	}
}

func TestLoadOverlaysDefaults(t *testing.T) {
	path := writeFile(t, t.TempDir(), "c.toml", `node = "m1.example.com"
[lease]
ttl = "12s"
clock_rate_error = 0
[units]
managed = ["witness@a.service"]
[hooks]
on_fence = ["/usr/bin/logger", "fenced"]
[http]
listen = ""
`, 0o600)
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Path = path
	want.Node = "m1.example.com"
	want.Lease.TTL = 12 * time.Second
	want.Lease.ClockRate = 0
	want.Units.Managed = []string{"witness@a.service"}
	want.Hooks.OnFence = []string{"/usr/bin/logger", "fenced"}
	want.HTTP.Listen = ""
	want.FromProfile = []string{"etcd.request_timeout", "lease.renew_interval", "units.stop_timeout", "units.kill_grace", "units.poll_interval", "health.interval", "health.timeout", "lease.slack"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

func TestLoadAcceptsSecrets(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	pw := writeFile(t, dir, "pw", "s3cret\n", 0o640)
	path := writeFile(t, dir, "c.toml", "[etcd]\nca = "+quote(p.ca)+"\ncert = "+quote(p.cert)+
		"\nkey = "+quote(p.key)+"\nusername = \"kha\"\npassword_file = "+quote(pw)+"\n", 0o640)
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cfg.Etcd.Password()
	if err != nil || got != "s3cret" {
		t.Errorf("Password() = %q, %v; want s3cret", got, err)
	}
	var b strings.Builder
	if err := cfg.Describe(&b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "s3cret") || !strings.Contains(b.String(), quote(pw)) {
		t.Errorf("Describe must show the password file's path, never its content:\n%s", b.String())
	}
}

// A world-readable configuration file is fine as long as it names no secret.
func TestLoadWorldReadableWithoutSecrets(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	path := writeFile(t, dir, "c.toml", "[etcd]\nca = "+quote(p.ca)+"\n", 0o644)
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
}

func TestValidateInCode(t *testing.T) {
	c := Default()
	c.Node = "m1"
	if err := c.Validate(); err != nil {
		t.Fatalf("Default with a node: %v", err)
	}
	c.Units.Managed = nil
	e := asError(t, c.Validate())
	if e.Key != "units.managed" || e.File == "" || e.Line != 0 {
		t.Errorf("got %+v", e)
	}
	e = asError(t, Default().Validate()) // no node: Load fills it, Validate does not
	if e.Key != "node" {
		t.Errorf("got %+v, want a refusal of node", e)
	}
}

func TestUnitNames(t *testing.T) {
	for _, ok := range []string{"kube-scheduler.service", "a.service", "witness@m1.service", "a@b@c.service",
		"x:y_z.w\\x2d.service", strings.Repeat("a", 247) + ".service"} {
		if msg := unitNameProblem(ok); msg != "" {
			t.Errorf("%q refused: %s", ok, msg)
		}
	}
	for _, bad := range []string{"", ".service", "service", "a.", "a.Service", "a b.service", "a/b.service",
		"a*.service", "@.service", "a@.service", "é.service", strings.Repeat("a", 248) + ".service"} {
		if unitNameProblem(bad) == "" {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Durations are time.Duration decoded by BurntSushi/toml from Go duration
// strings, after the schema pass refused everything else (TestLoadRefuses
// has the messages), and printed the same way.
func TestDurationText(t *testing.T) {
	var v struct {
		D time.Duration `toml:"d"`
	}
	if _, err := toml.Decode(`d = "1.5s"`, &v); err != nil || v.D != 1500*time.Millisecond {
		t.Errorf("1.5s -> %v, %v", v.D, err)
	}
	var b strings.Builder
	v.D = 90 * time.Second
	if err := toml.NewEncoder(&b).Encode(v); err != nil || strings.TrimSpace(b.String()) != `d = "1m30s"` {
		t.Errorf("encoded %q, %v", b.String(), err)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f", Line: 3, Key: "lease.ttl", Value: `"4s"`, Msg: "too small"}, `f:3: lease.ttl = "4s": too small`},
		{Error{File: "f", Key: "leases", Msg: "unknown key"}, `f: leases: unknown key`},
		{Error{File: "f", Line: 2, Value: `"["`, Msg: "TOML syntax: x"}, `f:2: TOML syntax: x (near "[")`},
		{Error{File: "f", Msg: "a\nb\x00"}, `f: a\nb\x00`},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// lease.accept_short_window = true runs a window under the etcd election
// gap, and Warnings says so; "warning" is taken for "warn"; a client
// certificate over plain http:// is warned about.
func TestLoadAcceptsShortWindowWithWarning(t *testing.T) {
	dir := t.TempDir()
	p := newPKI(t, dir)
	path := writeFile(t, dir, "config.toml", "profile = \"fast\"\n[lease]\nttl = \"4s\"\naccept_short_window = true\n[log]\nlevel = \"warning\"\n"+
		"[etcd]\nendpoints = [\"http://10.0.0.1:2379\", \"https://10.0.0.2:2379\"]\ncert = "+quote(p.cert)+"\nkey = "+quote(p.key)+"\n", 0o600)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "warn" {
		t.Errorf("log.level = %q, want \"warn\"", c.Log.Level)
	}
	w := strings.Join(c.Warnings(), "\n")
	for _, want := range []string{"lease.accept_short_window = true: the fence window 1.46s (under WatchdogSec=750ms) is shorter than the 3.1s",
		"etcd.endpoints http://10.0.0.1:2379 use plain http://"} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings lack %q:\n%s", want, w)
		}
	}
	if strings.Contains(w, "10.0.0.2") {
		t.Errorf("the https endpoint is warned about:\n%s", w)
	}
	pw := Default()
	pw.Etcd.Username, pw.Etcd.PasswordFile = "kha-supervisor", "/etc/kha-supervisor/etcd-password"
	if w := strings.Join(pw.Warnings(), "\n"); !strings.Contains(w, "etcd.username is set: with a password etcd's Go client authenticates again before every streamed request") {
		t.Errorf("etcd.username draws no warning about re-authentication per renewal (TestPasswordAuthenticatesEveryRenewal):\n%s", w)
	}
	if w := Default().Warnings(); len(w) != 0 {
		t.Errorf("the defaults draw warnings: %v", w)
	}
}

// Every shipped profile rides out the etcd election it promises to.
func TestProfilesRideOutTheirEtcdElection(t *testing.T) {
	for _, name := range ProfileNames() {
		c := Default()
		if err := c.UseProfile(name); err != nil {
			t.Fatal(err)
		}
		s := c.Stall()
		if s.Short() || s.MinTTL > c.Lease.TTL {
			t.Errorf("profile %s: window %s, gap %s, minimum TTL %s", name, s.Window, s.Gap, s.MinTTL)
		}
	}
}
