package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
	"github.com/kha-supervisor/kha-supervisor/lab/topo"
)

// Ports every member uses on its own address.
const (
	ClientPort = 2379
	PeerPort   = 2380
)

// Cluster is the lab's etcd cluster: members are topology hosts, each run as
// `Command... etcd-member FLAGS` inside its namespace.
type Cluster struct {
	Topo     *topo.Topology
	Members  []string // host names, e.g. e1 e2 e3
	Command  []string // argv prefix that runs MemberMain, e.g. [/srv/x/bin/kha-lab etcd-member]
	CA       *pki.CA
	RunDir   string // PID files
	DataDir  string // one data directory per member below it
	LogDir   string // one log per member
	Observer string // host from which the lab's own client dials (never cut by a scenario)
	LogLevel string
	// Raft timing; zero keeps etcd's defaults (100 ms heartbeat, 1 s
	// election timeout).
	HeartbeatMS, ElectionMS uint
}

// ClientURL is member's client endpoint.
func (c *Cluster) ClientURL(member string) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(c.Topo.Addr(member).String(), fmt.Sprint(ClientPort)))
}

// Endpoints lists every member's client URL, for supervisors' configs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members {
		out = append(out, c.ClientURL(m))
	}
	return out
}

func (c *Cluster) peerURL(member string) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(c.Topo.Addr(member).String(), fmt.Sprint(PeerPort)))
}

func (c *Cluster) pidFile(m string) string { return filepath.Join(c.RunDir, "etcd-"+m+".pid") }

// LogFile is where member's output goes.
func (c *Cluster) LogFile(m string) string { return filepath.Join(c.LogDir, "etcd-"+m+".log") }

// token is unique per lab so a member never talks to another lab's cluster.
func (c *Cluster) token() string { return c.Topo.Prefix + "-etcd" }

func (c *Cluster) memberConfig(m string) (MemberConfig, error) {
	pair, err := c.CA.Server("etcd-"+m, c.Topo.Addr(m).String())
	if err != nil {
		return MemberConfig{}, err
	}
	var initial []string
	for _, x := range c.Members {
		initial = append(initial, x+"="+c.peerURL(x))
	}
	lvl := c.LogLevel
	if lvl == "" {
		lvl = "warn"
	}
	return MemberConfig{
		Name:           m,
		DataDir:        filepath.Join(c.DataDir, m),
		ClientURL:      c.ClientURL(m),
		PeerURL:        c.peerURL(m),
		InitialCluster: strings.Join(initial, ","),
		Token:          c.token(),
		CA:             c.CA.CertFile,
		Cert:           pair.CertFile,
		Key:            pair.KeyFile,
		LogLevel:       lvl,
		HeartbeatMS:    c.HeartbeatMS,
		ElectionMS:     c.ElectionMS,
	}, nil
}

// Running reports whether member's process runs.
func (c *Cluster) Running(m string) bool {
	_, ok := proc.Running(c.pidFile(m))
	return ok
}

// PID is member's process ID, when it runs.
func (c *Cluster) PID(m string) (int, bool) {
	id, ok := proc.Running(c.pidFile(m))
	return id.PID, ok
}

// Start launches member unless it already runs. Its data directory is kept,
// so a stopped member rejoins as itself.
func (c *Cluster) Start(m string) error {
	if c.Running(m) {
		return nil
	}
	mc, err := c.memberConfig(m)
	if err != nil {
		return err
	}
	argv := append([]string{"ip", "netns", "exec", c.Topo.NetNS(m)}, c.Command...)
	argv = append(argv, mc.Args()...)
	if _, err := proc.Start(proc.Spec{Argv: argv, PIDFile: c.pidFile(m), LogFile: c.LogFile(m)}); err != nil {
		return fmt.Errorf("etcd: start %s: %w", m, err)
	}
	return nil
}

// Stop ends member with SIGTERM (a clean shutdown), SIGKILL after 10 s.
func (c *Cluster) Stop(ctx context.Context, m string) error {
	return proc.Stop(ctx, c.pidFile(m), 10*time.Second)
}

// Kill ends member with SIGKILL, as a crash does.
func (c *Cluster) Kill(ctx context.Context, m string) error {
	return proc.Kill(ctx, c.pidFile(m))
}

// Pause freezes member (SIGSTOP); Resume thaws it.
func (c *Cluster) Pause(m string) error  { return proc.Signal(c.pidFile(m), syscall.SIGSTOP) }
func (c *Cluster) Resume(m string) error { return proc.Signal(c.pidFile(m), syscall.SIGCONT) }

// Up starts every member that is not running and waits until all of them
// agree on a leader.
func (c *Cluster) Up(ctx context.Context) error {
	for _, m := range c.Members {
		if err := c.Start(m); err != nil {
			return err
		}
	}
	return c.WaitHealthy(ctx, c.Members...)
}

// Down stops every member and deletes the data directories.
func (c *Cluster) Down(ctx context.Context) error {
	var errs []error
	for _, m := range c.Members {
		errs = append(errs, c.Stop(ctx, m))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.RemoveAll(c.DataDir); err != nil {
		return fmt.Errorf("etcd: remove data: %w", err)
	}
	return nil
}

// Client opens a client with the lab's own certificate, dialing from the
// observer's namespace (the host's root namespace has no route into the lab).
func (c *Cluster) Client(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	cert, err := c.clientCert("lab")
	if err != nil {
		return nil, err
	}
	obs := c.Observer
	if obs == "" {
		obs = "obs"
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return c.Topo.DialContext(ctx, obs, "tcp", addr)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		TLS:         &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12},
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(dial)},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: client: %w", err)
	}
	return cli, nil
}

// clientCert loads the client certificate of user, issuing it on first use
// (later lab commands run in other processes and reuse it).
func (c *Cluster) clientCert(user string) (tls.Certificate, error) {
	pair := pki.Pair{
		CertFile: filepath.Join(c.CA.Dir, "client-"+user+".crt"),
		KeyFile:  filepath.Join(c.CA.Dir, "client-"+user+".key"),
	}
	if _, err := os.Stat(pair.KeyFile); err != nil {
		if pair, err = c.CA.Client(user); err != nil {
			return tls.Certificate{}, err
		}
	}
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("etcd: load %s client certificate: %w", user, err)
	}
	return cert, nil
}

// MoveLeader makes member to the raft leader (etcd's leadership transfer,
// asked of the current leader) and waits until every member agrees.
func (c *Cluster) MoveLeader(ctx context.Context, to string) error {
	var lead string
	var toID uint64
	sts := c.Statuses(ctx)
	for _, s := range sts {
		if s.Err == nil && s.ID == s.Leader {
			lead = s.Member
		}
		if s.Err == nil && s.Member == to {
			toID = s.ID
		}
	}
	switch {
	case lead == to:
		return nil
	case lead == "" || toID == 0:
		return fmt.Errorf("etcd: move the leader to %s: %s", to, describe(sts))
	}
	cli, err := c.Client(c.ClientURL(lead))
	if err != nil {
		return err
	}
	defer cli.Close()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.MoveLeader(mctx, toID); err != nil {
		return fmt.Errorf("etcd: move the leader from %s to %s: %w", lead, to, err)
	}
	if err := c.WaitHealthy(mctx); err != nil {
		return err
	}
	if now, err := c.Leader(ctx); now != to {
		return fmt.Errorf("etcd: moved the leader to %s, but %q leads (%v)", to, now, err)
	}
	return nil
}

// Leader is the member that reports itself the raft leader.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	for _, s := range c.Statuses(ctx) {
		if s.Err == nil && s.ID == s.Leader {
			return s.Member, nil
		}
	}
	return "", errors.New("etcd: no member reports itself leader")
}

// Status is one member's view, as the lab sees it.
type Status struct {
	Member   string
	ID       uint64
	Leader   uint64
	RaftTerm uint64
	Err      error
}

// Statuses asks each named member (all when none) for its status, with a
// short timeout per member.
func (c *Cluster) Statuses(ctx context.Context, members ...string) []Status {
	if len(members) == 0 {
		members = c.Members
	}
	out := make([]Status, len(members))
	for i, m := range members {
		out[i] = Status{Member: m}
		cli, err := c.Client(c.ClientURL(m))
		if err != nil {
			out[i].Err = err
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(cctx, c.ClientURL(m))
		cancel()
		cli.Close()
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].ID, out[i].Leader, out[i].RaftTerm = st.Header.MemberId, st.Leader, st.RaftTerm
	}
	return out
}

// WaitHealthy waits until every named member answers and all report the same
// leader, one of them: a survivor still naming a dead leader (until its
// election timeout) does not count.
func (c *Cluster) WaitHealthy(ctx context.Context, members ...string) error {
	var last []Status
	for {
		last = c.Statuses(ctx, members...)
		if agreed(last) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd: members %v not healthy: %s: %w", members, describe(last), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func agreed(sts []Status) bool {
	if len(sts) == 0 {
		return false
	}
	leaderAmong := false
	for _, s := range sts {
		if s.Err != nil || s.Leader == 0 || s.Leader != sts[0].Leader {
			return false
		}
		leaderAmong = leaderAmong || s.ID == s.Leader
	}
	return leaderAmong
}

func describe(sts []Status) string {
	var parts []string
	for _, s := range sts {
		if s.Err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", s.Member, s.Err))
		} else {
			parts = append(parts, fmt.Sprintf("%s: leader %x term %d", s.Member, s.Leader, s.RaftTerm))
		}
	}
	return strings.Join(parts, "; ")
}
