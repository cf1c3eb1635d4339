package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// clientFlags are the etcd connection flags of the operator commands, named
// as etcdctl names them, each also read from a KHA_* environment variable.
// They override the configuration file, which is then optional: a non-root
// operator usually cannot read /etc/kha-supervisor/config.toml.
type clientFlags struct {
	endpoints    []string
	cacert       string
	cert, key    string
	user         string
	passwordFile string
	cluster      string
	prefix       string
	// dialTimeout and commandTimeout override etcd.dial_timeout and the
	// command's own deadline; 0: not given.
	dialTimeout, commandTimeout *time.Duration
}

// clientEnv maps each flag to its environment variable.
var clientEnv = []struct{ flag, env, usage string }{
	{"endpoints", "KHA_ENDPOINTS", "etcd endpoint `urls`, comma-separated (etcd.endpoints); a bare host:port means https:// with --cacert or --cert (or the file's etcd.ca, etcd.cert), http:// otherwise"},
	{"cacert", "KHA_CACERT", "CA bundle `file` for the etcd servers (etcd.ca)"},
	{"cert", "KHA_CERT", "client certificate `file` (etcd.cert)"},
	{"key", "KHA_KEY", "client key `file` (etcd.key)"},
	{"user", "KHA_USER", "etcd user `name` (etcd.username); the password comes from --password-file"},
	{"password-file", "KHA_PASSWORD_FILE", "`file` holding the etcd password (etcd.password_file)"},
	{"cluster", "KHA_CLUSTER", "group `name` (cluster)"},
	{"prefix", "KHA_PREFIX", "etcd key `prefix` (etcd.prefix)"},
}

// clientTimeoutEnv are the duration flags of the operator commands, with
// their environment variables (addClientFlags adds them itself).
var clientTimeoutEnv = []struct{ flag, env, usage string }{
	{"dial-timeout", "KHA_DIAL_TIMEOUT", ""},
	{"command-timeout", "KHA_COMMAND_TIMEOUT", ""},
}

// clientOptionEnv is every client option with its environment variable.
func clientOptionEnv() []struct{ flag, env, usage string } {
	return append(append([]struct{ flag, env, usage string }(nil), clientEnv...), clientTimeoutEnv...)
}

// addClientFlags adds the connection flags to an operator command.
func addClientFlags(c *cobra.Command) *clientFlags {
	f := &clientFlags{}
	fs := c.Flags()
	for _, x := range clientEnv {
		usage := x.usage + "; env " + x.env
		switch x.flag {
		case "endpoints":
			fs.StringSliceVar(&f.endpoints, x.flag, nil, usage)
		default:
			fs.StringVar(f.field(x.flag), x.flag, "", usage)
		}
	}
	f.dialTimeout = durationFlag(fs, "dial-timeout", 0, "how long to wait for a connection to etcd (etcd.dial_timeout; default 2s); env KHA_DIAL_TIMEOUT")
	f.commandTimeout = durationFlag(fs, "command-timeout", 0, "how long each etcd read or write of the command may take (default 5 x etcd.request_timeout + 1s); env KHA_COMMAND_TIMEOUT")
	for _, n := range []string{"cacert", "cert", "key", "password-file"} {
		_ = c.MarkFlagFilename(n)
	}
	c.Annotations = map[string]string{"client": "true"}
	return f
}

func (f *clientFlags) field(name string) *string {
	switch name {
	case "cacert":
		return &f.cacert
	case "cert":
		return &f.cert
	case "key":
		return &f.key
	case "user":
		return &f.user
	case "password-file":
		return &f.passwordFile
	case "cluster":
		return &f.cluster
	case "prefix":
		return &f.prefix
	}
	panic("no client flag " + name)
}

// fromEnv fills every flag not given on the command line from its
// environment variable.
func (f *clientFlags) fromEnv(e env, fs *pflag.FlagSet) error {
	for _, d := range []struct {
		flag, env string
		dst       *time.Duration
	}{{"dial-timeout", "KHA_DIAL_TIMEOUT", f.dialTimeout}, {"command-timeout", "KHA_COMMAND_TIMEOUT", f.commandTimeout}} {
		if v := e.env(d.env); v != "" && !fs.Changed(d.flag) && d.dst != nil {
			if err := (durationValue{d.dst}).Set(v); err != nil {
				return fmt.Errorf("%s=%q: %w", d.env, v, err)
			}
		}
	}
	for _, x := range clientEnv {
		v := e.env(x.env)
		if v == "" || fs.Changed(x.flag) {
			continue
		}
		if x.flag == "endpoints" {
			f.endpoints = strings.Split(v, ",")
			continue
		}
		*f.field(x.flag) = v
	}
	return nil
}

func (f *clientFlags) any() bool {
	return len(f.endpoints) > 0 || f.dialTimeout != nil && *f.dialTimeout > 0 || f.cacert != "" || f.cert != "" || f.key != "" || f.user != "" ||
		f.passwordFile != "" || f.cluster != "" || f.prefix != ""
}

// clientDefaultPath is the file a client command reads without -c; a
// variable so that tests do not depend on this machine's /etc.
var clientDefaultPath = config.DefaultPath

// clientConfig is the configuration an operator command connects with, and
// whether it came from a file (only then does it name this node).
type clientConfig struct {
	config.Config
	fromFile bool
}

// loadClientConfig reads -c FILE (or the default file) with the client-only
// checks and applies the flags. Without -c, a default file that does not
// exist or cannot be read is no error when --endpoints (or KHA_ENDPOINTS)
// says where etcd is.
func loadClientConfig(e env, c *cobra.Command, f *clientFlags) (clientConfig, error) {
	if err := f.fromEnv(e, c.Flags()); err != nil {
		return clientConfig{}, err
	}
	path, _ := c.Flags().GetString("config")
	explicit := path != ""
	if !explicit {
		path = e.env("KHA_CONFIG")
		explicit = path != ""
	}
	if !explicit {
		path = clientDefaultPath
	}
	cfg, err := config.LoadClient(path)
	fromFile := err == nil
	var ce *config.Error
	unreadable := errors.As(err, &ce) && isUnreadable(ce)
	switch {
	case err == nil:
	case !explicit && unreadable && len(f.endpoints) > 0:
		cfg = config.Default()
		h, _ := os.Hostname()
		cfg.Node = strings.ToLower(h)
	case !explicit && unreadable:
		return clientConfig{}, fmt.Errorf("%w; without access to it, pass --endpoints (and --cacert, --cert, --key as needed) or set KHA_ENDPOINTS", err)
	default:
		return clientConfig{}, err
	}
	if f.any() {
		if strings.Contains(f.user, ":") {
			return clientConfig{}, fmt.Errorf("--user %q: the password is only read from a file: --user NAME --password-file FILE", strings.SplitN(f.user, ":", 2)[0]+":...")
		}
		f.apply(&cfg.Etcd, &cfg.Cluster)
		// A refusal names where the values came from.
		v := cfg
		v.Path = "(command-line options and KHA_* variables)"
		if fromFile {
			v.Path = "(command-line options and KHA_* variables over " + path + ")"
		}
		if err := v.ValidateClient(); err != nil {
			return clientConfig{}, err
		}
	}
	return clientConfig{Config: cfg, fromFile: fromFile}, nil
}

func isUnreadable(e *config.Error) bool {
	return e.Key == "" && (errors.Is(e.Err, fs.ErrNotExist) || errors.Is(e.Err, fs.ErrPermission))
}

func (f *clientFlags) apply(ec *config.Etcd, cluster *string) {
	if len(f.endpoints) > 0 {
		ec.Endpoints = f.endpoints
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&ec.CA, f.cacert)
	set(&ec.Cert, f.cert)
	set(&ec.Key, f.key)
	set(&ec.Username, f.user)
	set(&ec.PasswordFile, f.passwordFile)
	set(&ec.Prefix, f.prefix)
	set(cluster, f.cluster)
	if f.dialTimeout != nil && *f.dialTimeout > 0 {
		ec.DialTimeout = *f.dialTimeout
	}
	if len(f.endpoints) > 0 {
		ec.Endpoints = withScheme(f.endpoints, ec.CA != "" || ec.Cert != "")
	}
}

// withScheme gives bare host:port endpoints of the command line, as
// etcdctl accepts them, a scheme: https when TLS is configured (a CA or a
// client certificate), http otherwise. The configuration file stays strict.
func withScheme(endpoints []string, tls bool) []string {
	scheme := "http://"
	if tls {
		scheme = "https://"
	}
	out := make([]string, len(endpoints))
	for i, ep := range endpoints {
		ep = strings.TrimSpace(ep)
		if ep != "" && !strings.Contains(ep, "://") {
			ep = scheme + ep
		}
		out[i] = ep
	}
	return out
}

// session is a connection to the group for an operator command.
type session struct {
	cfg      config.Config
	fromFile bool // cfg.Node names this node
	cli      *clientv3.Client
	keys     group.Keys
	timeout  time.Duration // of each read or write (--command-timeout)
}

// connect loads the client configuration and dials etcd; a refusal is
// printed and becomes its exit code.
// withSession connects, runs fn on the session and closes it: connect's or
// fn's exit code becomes the command's.
func withSession(e env, c *cobra.Command, f *clientFlags, fn func(*session) int) error {
	s, code := connect(e, c, f)
	if code != exitOK {
		return exit(code)
	}
	defer s.close()
	return exit(fn(s))
}

func connect(e env, c *cobra.Command, f *clientFlags) (*session, int) {
	cc, err := loadClientConfig(e, c, f)
	if err != nil {
		fmt.Fprintln(e.stderr, "kha-supervisor:", err)
		return nil, exitConfig
	}
	cfg := cc.Config
	ctx, cancel := context.WithTimeout(e.ctx, cfg.Etcd.DialTimeout+2*cfg.Etcd.RequestTimeout+time.Second)
	defer cancel()
	cli, err := dialClient(ctx, cfg.Etcd)
	if err != nil {
		fmt.Fprintln(e.stderr, "kha-supervisor:", err)
		return nil, exitFailure
	}
	timeout := 5*cfg.Etcd.RequestTimeout + time.Second
	if *f.commandTimeout > 0 {
		timeout = *f.commandTimeout
	}
	return &session{cfg: cfg, fromFile: cc.fromFile, cli: cli, keys: group.NewKeys(cfg.Etcd.Prefix, cfg.Cluster), timeout: timeout}, exitOK
}

// commandTimeout bounds each read or write of an operator command.
func (s *session) commandTimeout() time.Duration {
	if s.timeout > 0 {
		return s.timeout
	}
	return 5*s.cfg.Etcd.RequestTimeout + time.Second
}

// completeMembers completes a node name from the live member records, for
// the shells' completion; it gives up quietly (no suggestions) when etcd
// does not answer within two seconds.
func completeMembers(e env, cf *clientFlags) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		const none = cobra.ShellCompDirectiveNoFileComp
		if len(args) > 0 && c.Flags().Lookup("to") == nil {
			return nil, none
		}
		cc, err := loadClientConfig(e, c, cf)
		if err != nil {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		defer cancel()
		cli, err := dialClient(ctx, cc.Etcd)
		if err != nil {
			return nil, none
		}
		defer cli.Close()
		recs, _, err := group.ReadMembers(ctx, cli, group.NewKeys(cc.Etcd.Prefix, cc.Cluster))
		if err != nil {
			return nil, none
		}
		var out []string
		for n := range recs {
			out = append(out, n)
		}
		sort.Strings(out)
		return out, none
	}
}
