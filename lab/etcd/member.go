// Package etcd runs the lab's etcd cluster: three real etcd servers (the
// embed package, the same code as the etcd binary), each a separate process
// inside its own network namespace, TLS for clients and peers with client
// certificates required. Member is the server side (`kha-lab etcd-member`);
// Cluster is what the lab uses to start, stop, kill and watch them.
package etcd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// MemberConfig is one member's settings, as `kha-lab etcd-member` flags.
type MemberConfig struct {
	Name           string
	DataDir        string
	ClientURL      string // https://ADDR:2379, listened on and advertised
	PeerURL        string // https://ADDR:2380
	InitialCluster string // name=peerURL,...
	Token          string // initial cluster token: a member never joins another lab's cluster
	CA             string
	Cert           string // server certificate, also presented to peers
	Key            string
	LogLevel       string
	HeartbeatMS    uint // raft heartbeat interval; 0 = etcd's default (100)
	ElectionMS     uint // raft election timeout; 0 = etcd's default (1000)
}

// Args renders c as the flags MemberMain parses.
func (c MemberConfig) Args() []string {
	return []string{
		"--name", c.Name, "--data-dir", c.DataDir,
		"--client-url", c.ClientURL, "--peer-url", c.PeerURL,
		"--initial-cluster", c.InitialCluster, "--token", c.Token,
		"--ca", c.CA, "--cert", c.Cert, "--key", c.Key, "--log-level", c.LogLevel,
		"--heartbeat-ms", fmt.Sprint(c.HeartbeatMS), "--election-ms", fmt.Sprint(c.ElectionMS),
	}
}

// MemberMain is `kha-lab etcd-member`: it parses args, runs the member in the
// foreground until SIGTERM or SIGINT, and returns the exit code.
func MemberMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c MemberConfig
	fs.StringVar(&c.Name, "name", "", "member name")
	fs.StringVar(&c.DataDir, "data-dir", "", "data directory (kept across restarts)")
	fs.StringVar(&c.ClientURL, "client-url", "", "client URL to listen on and advertise (https://ADDR:PORT)")
	fs.StringVar(&c.PeerURL, "peer-url", "", "peer URL to listen on and advertise")
	fs.StringVar(&c.InitialCluster, "initial-cluster", "", "name=peerURL,... of every member")
	fs.StringVar(&c.Token, "token", "kha-lab", "initial cluster token")
	fs.StringVar(&c.CA, "ca", "", "CA certificate (PEM) trusted for clients and peers")
	fs.StringVar(&c.Cert, "cert", "", "member certificate (PEM)")
	fs.StringVar(&c.Key, "key", "", "member key (PEM)")
	fs.StringVar(&c.LogLevel, "log-level", "warn", "etcd log level")
	fs.UintVar(&c.HeartbeatMS, "heartbeat-ms", 0, "raft heartbeat interval in ms (0: etcd's default, 100)")
	fs.UintVar(&c.ElectionMS, "election-ms", 0, "raft election timeout in ms (0: etcd's default, 1000)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("member", c.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := RunMember(ctx, c, log); err != nil {
		log.Error("etcd member failed", "err", err)
		return 1
	}
	return 0
}

// RunMember starts the member and serves until ctx ends or the server fails.
func RunMember(ctx context.Context, c MemberConfig, log *slog.Logger) error {
	for k, v := range map[string]string{"name": c.Name, "data-dir": c.DataDir, "client-url": c.ClientURL,
		"peer-url": c.PeerURL, "initial-cluster": c.InitialCluster, "ca": c.CA, "cert": c.Cert, "key": c.Key} {
		if v == "" {
			return fmt.Errorf("etcd member: --%s is required", k)
		}
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil {
		return fmt.Errorf("etcd member: client URL: %w", err)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil {
		return fmt.Errorf("etcd member: peer URL: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.DataDir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = c.InitialCluster
	cfg.InitialClusterToken = c.Token
	// "new" is right on every start: a member whose data directory holds a
	// WAL restarts from it and ignores the initial cluster.
	cfg.ClusterState = embed.ClusterStateFlagNew
	if c.HeartbeatMS > 0 {
		cfg.TickMs = c.HeartbeatMS
	}
	if c.ElectionMS > 0 {
		cfg.ElectionMs = c.ElectionMS
	}
	tls := transport.TLSInfo{CertFile: c.Cert, KeyFile: c.Key, TrustedCAFile: c.CA, ClientCertAuth: true}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tls, tls
	cfg.Logger = "zap"
	cfg.LogLevel = c.LogLevel
	cfg.LogOutputs = []string{"stderr"}
	cfg.ListenMetricsUrls = nil
	cfg.Metrics = "basic"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: start: %w", c.Name, err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	select {
	case <-e.Server.ReadyNotify():
		log.Info("etcd member ready", "client", c.ClientURL, "peer", c.PeerURL)
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", c.Name, err)
	case <-ctx.Done():
		// A member can wait for its peers (no quorum) forever; a stop
		// request must still end it.
		log.Info("etcd member stopped before it became ready")
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", c.Name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("etcd member %s: server stopped on its own", c.Name)
	case <-ctx.Done():
		start := time.Now()
		e.Close()
		closed = true
		log.Info("etcd member stopped", "took", time.Since(start))
	}
	return nil
}
