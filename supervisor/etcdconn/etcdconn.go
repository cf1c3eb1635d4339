// Package etcdconn builds the daemon's etcd client from its configuration and
// checks at start-up that the client can actually talk to the cluster, so a
// wrong password or certificate is reported at once and by endpoint instead
// of surfacing later as an election that never succeeds.
package etcdconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Keepalive of the gRPC connections. gRPC raises any ping time below 10 s
// to 10 s, and etcd servers refuse pings on connections without an open RPC
// (so PermitWithoutStream stays off): keepalive only notices a dead
// connection while a request is outstanding, about 11 s after it went
// silent. Lease safety never depends on it (renewals carry their own
// deadlines); it only makes the client drop a dead connection and redial.
const (
	keepAliveTime    = 2 * time.Second
	keepAliveTimeout = time.Second
)

// defaultDialTimeout applies when the configuration leaves dial_timeout 0.
const defaultDialTimeout = 2 * time.Second

// Redialing after a connection was lost. A partition of more than the
// keepalive timeout drops the connection (gRPC sets TCP_USER_TIMEOUT to it,
// and a renewal's bytes go unacknowledged), and every redial in the
// partition fails. gRPC's default then waits 1 s and 1.6 times longer after
// each failure, so a link back after a few seconds found the client asleep
// for up to seconds more while its lease ran out: in the lab, the default
// profile fenced on a 3 s flap it should ride, and a renewal was answered
// 0.7-4.2 s after the heal (lab/etcd TestSupervisorClientBackSoonAfterAHeal).
// The connection is what every renewal needs, so redial about
// redialMaxDelay after a failure (gRPC adds up to 20% jitter); an attempt,
// TLS handshake included, is given up after dial_timeout (not gRPC's 20 s),
// so a SYN lost in the partition is replaced by a fresh one. dial_timeout
// already bounds the start-up check, so an etcd that cannot complete a
// handshake within it was refused there too. The cost is a connection
// attempt per client and unreachable endpoint about every 100 ms, each
// refused or lost at once.
const (
	redialBaseDelay = 50 * time.Millisecond
	redialMaxDelay  = 100 * time.Millisecond
)

func redialParams(dialTimeout time.Duration) grpc.ConnectParams {
	return grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  redialBaseDelay,
			Multiplier: backoff.DefaultConfig.Multiplier,
			Jitter:     backoff.DefaultConfig.Jitter,
			MaxDelay:   redialMaxDelay,
		},
		MinConnectTimeout: dialTimeout,
	}
}

// Client is what ServerVersion needs; *clientv3.Client implements it.
type Client interface {
	Endpoints() []string
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
}

// ClientConfig turns the [etcd] section into a clientv3 configuration: TLS
// from ca/cert/key, the password read from password_file, the dial timeout,
// keepalive, no endpoint auto-sync (the configured endpoints are the ones
// the operator vetted), and client-library logs at error level through
// slog.Default().
func ClientConfig(cfg config.Etcd) (clientv3.Config, error) {
	return ClientConfigDialing(cfg, systemDialer.DialContext)
}

// systemDialer dials as gRPC's own dialer does: TCP keepalive on, with the
// operating system's timings (gRPC's keepalive and TCP_USER_TIMEOUT, which
// it sets on the connection, notice a dead peer first).
var systemDialer = &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}}

// ClientConfigDialing is ClientConfig with dial for every connection
// attempt (the lab dials from a host's network namespace), behind the
// racing dialer that ClientConfig uses as well (racedial.go). A proxy set
// in the environment (HTTPS_PROXY) is not used: gRPC consults it only with
// its own dialer, and a supervisor's etcd belongs on a direct path.
func ClientConfigDialing(cfg config.Etcd, dial func(ctx context.Context, network, address string) (net.Conn, error)) (clientv3.Config, error) {
	if len(cfg.Endpoints) == 0 {
		return clientv3.Config{}, errors.New("etcd: no endpoints configured")
	}
	cc := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		AutoSyncInterval:     0,
		Logger:               zap.New(newSlogCore(zap.ErrorLevel)).With(zap.String("component", "etcd-client")),
	}
	if cc.DialTimeout <= 0 {
		cc.DialTimeout = defaultDialTimeout
	}
	cc.DialOptions = []grpc.DialOption{
		grpc.WithConnectParams(redialParams(cc.DialTimeout)),
		grpc.WithContextDialer(raceDialer(dial)),
	}

	if (cfg.Cert == "") != (cfg.Key == "") {
		return clientv3.Config{}, fmt.Errorf("etcd: cert and key must be set together (cert=%q, key=%q)", cfg.Cert, cfg.Key)
	}
	if cfg.CA != "" || cfg.Cert != "" || anyHTTPS(cfg.Endpoints) {
		info := transport.TLSInfo{CertFile: cfg.Cert, KeyFile: cfg.Key, TrustedCAFile: cfg.CA}
		tlsCfg, err := info.ClientConfig()
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("etcd: TLS files (ca=%q, cert=%q, key=%q): %w", cfg.CA, cfg.Cert, cfg.Key, err)
		}
		cc.TLS = tlsCfg
	}

	switch {
	case cfg.Username != "" && cfg.PasswordFile == "":
		return clientv3.Config{}, fmt.Errorf("etcd: username %q is set but password_file is not", cfg.Username)
	case cfg.Username == "" && cfg.PasswordFile != "":
		return clientv3.Config{}, fmt.Errorf("etcd: password_file %s is set but username is not", cfg.PasswordFile)
	case cfg.Username != "":
		pw, err := cfg.Password()
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("etcd: %w", err)
		}
		if pw == "" {
			// clientv3 would silently skip authentication with an empty
			// password and act on the certificate alone.
			return clientv3.Config{}, fmt.Errorf("etcd: password_file %s is empty", cfg.PasswordFile)
		}
		cc.Username = cfg.Username
		cc.Password = pw
	}
	return cc, nil
}

func anyHTTPS(endpoints []string) bool {
	for _, ep := range endpoints {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return true
		}
	}
	return false
}

// Dial builds the client and proves it works: with a username it logs in
// (clientv3 does so while connecting), then it asks every endpoint for its
// status, which needs a completed TLS handshake and, with auth on, a valid
// identity. It succeeds when at least one endpoint answers, so one member
// down does not stop the daemon (endpoints that failed are logged as
// warnings); it fails naming every endpoint and its error when none does.
// ctx bounds the check; without a deadline, dial_timeout plus
// request_timeout apply. The client's own lifetime does not depend on ctx.
func Dial(ctx context.Context, cfg config.Etcd) (*clientv3.Client, error) {
	cc, err := ClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	// Each endpoint gets one connection attempt plus one request; a member
	// that is down costs no more than that, whatever ctx allows.
	perEndpoint := cc.DialTimeout + cfg.RequestTimeout
	if cfg.RequestTimeout <= 0 {
		perEndpoint += time.Second
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		what := "connect"
		if cc.Username != "" {
			what = fmt.Sprintf("log in as user %q", cc.Username)
		}
		if opaque(err) {
			findings := diagnoseAll(context.WithoutCancel(ctx), cc.Endpoints, cc.TLS, cc.DialTimeout)
			var errs []error
			for _, ep := range cc.Endpoints {
				if f := findings[ep]; f != nil {
					errs = append(errs, fmt.Errorf("%s: %w", ep, f))
				}
			}
			if len(errs) > 0 {
				err = fmt.Errorf("%w; %w", err, errors.Join(errs...))
			}
		}
		return nil, fmt.Errorf("etcd %s: %s (%s): %w", strings.Join(cc.Endpoints, ","), what, describeIdentity(cc), err)
	}
	sctx, cancel := context.WithTimeout(ctx, perEndpoint)
	defer cancel()
	results := statusAll(sctx, cli)
	var failed []error
	var unclear []string
	for _, r := range results {
		if r.err != nil && opaque(r.err) {
			unclear = append(unclear, r.endpoint)
		}
	}
	findings := map[string]error{}
	if len(unclear) > 0 {
		findings = diagnoseAll(context.WithoutCancel(ctx), unclear, cc.TLS, cc.DialTimeout)
	}
	for _, r := range results {
		if r.err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", r.endpoint, explain(r.err, findings[r.endpoint])))
		}
	}
	if len(failed) == len(results) {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd: no endpoint accepted this client (%s): %w", describeIdentity(cc), errors.Join(failed...))
	}
	if err := sameCluster(results); err != nil {
		_ = cli.Close()
		return nil, err
	}
	for _, err := range failed {
		slog.Warn("etcd endpoint did not answer at start-up; continuing with the others", "err", err)
	}
	return cli, nil
}

func describeIdentity(cc clientv3.Config) string {
	var parts []string
	if cc.Username != "" {
		parts = append(parts, fmt.Sprintf("user %q", cc.Username))
	}
	if cc.TLS != nil {
		if len(cc.TLS.Certificates) > 0 || cc.TLS.GetClientCertificate != nil {
			parts = append(parts, "TLS with client certificate")
		} else {
			parts = append(parts, "TLS without client certificate")
		}
	}
	if len(parts) == 0 {
		return "plain, anonymous"
	}
	return strings.Join(parts, ", ")
}

type endpointStatus struct {
	endpoint string
	resp     *clientv3.StatusResponse
	err      error
}

// sameCluster refuses endpoints that answer for different etcd clusters:
// two clusters would make two groups, each with a leader, and a foreign
// member's "lease not found" would fence a healthy holder.
func sameCluster(results []endpointStatus) error {
	ids := map[uint64][]string{}
	for _, r := range results {
		if r.err == nil && r.resp != nil && r.resp.Header != nil {
			ids[r.resp.Header.ClusterId] = append(ids[r.resp.Header.ClusterId], r.endpoint)
		}
	}
	if len(ids) < 2 {
		return nil
	}
	var parts []string
	for id, eps := range ids {
		parts = append(parts, fmt.Sprintf("cluster %x: %s", id, strings.Join(eps, ",")))
	}
	slices.Sort(parts)
	return fmt.Errorf("etcd: %w: the endpoints belong to %d different etcd clusters (%s); list only members of one cluster in etcd.endpoints",
		ErrForeignCluster, len(ids), strings.Join(parts, "; "))
}

// statusAll asks every endpoint at once, each on its own connection.
func statusAll(ctx context.Context, cli Client) []endpointStatus {
	eps := cli.Endpoints()
	out := make([]endpointStatus, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() {
			resp, err := cli.Status(ctx, ep)
			out[i] = endpointStatus{endpoint: ep, resp: resp, err: err}
		})
	}
	wg.Wait()
	return out
}

// PerEndpoint returns one client per configured endpoint, for the lease
// renewals the supervisor sends to every member at once (a silently
// unreachable member then costs nothing; a balanced client would keep
// sending it some renewals until gRPC's keepalive, at least 10 s, notices).
// An endpoint whose client cannot be built now (with a username, clientv3
// logs in while connecting, so a member that is down fails) is skipped
// with a warning; callers keep their balanced client in the set as well.
func PerEndpoint(cfg config.Etcd, log *slog.Logger) []*clientv3.Client {
	if len(cfg.Endpoints) < 2 {
		return nil
	}
	cc, err := ClientConfig(cfg)
	if err != nil {
		return nil
	}
	var out []*clientv3.Client
	for _, ep := range cfg.Endpoints {
		one := cc
		one.Endpoints = []string{ep}
		cli, err := clientv3.New(one)
		if err != nil {
			log.Warn("no renewal path through this etcd endpoint for now", "endpoint", ep, "err", err)
			continue
		}
		out = append(out, cli)
	}
	return out
}
