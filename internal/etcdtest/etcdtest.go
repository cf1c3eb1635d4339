// Package etcdtest runs a real etcd cluster inside the test process (the
// embed package: the same server code as the etcd binary), so election and
// fencing tests exercise real leases, real raft and real quorum loss.
//
// Members listen on loopback ports picked at random; their data directories
// live under t.TempDir(); everything is stopped by t.Cleanup. Election
// settings are fast (50 ms heartbeat, 500 ms election timeout) so a test that
// stops and restarts members spends little time waiting for a leader;
// Options.Timing = Stock runs etcd's own defaults instead (100 ms, 1 s), for
// tests whose claim is about a stock etcd.
package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/crypto/bcrypt"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
)

// Timing of the test members. An election timeout of 10 ticks is what etcd
// recommends; both are far below production values on purpose.
const (
	TickMs     = 50
	ElectionMs = 500
)

// Timing is a member's raft heartbeat interval and election timeout in
// milliseconds (etcd --heartbeat-interval and --election-timeout). The zero
// value means TickMs and ElectionMs.
type Timing struct {
	TickMs, ElectionMs uint
}

// Stock is etcd's default timing, what an operator's etcd runs unless it was
// tuned: a leader loss takes the followers 1-2 s (the election timeout,
// randomised up to twice) to notice.
var Stock = Timing{TickMs: 100, ElectionMs: 1000}

func (t Timing) orFast() Timing {
	if t.TickMs == 0 || t.ElectionMs == 0 {
		return Timing{TickMs: TickMs, ElectionMs: ElectionMs}
	}
	return t
}

// startTimeout bounds how long a cluster (or a restarted member) may take to
// become ready. Generous: the CI machine is slow and shared.
const startTimeout = 30 * time.Second

// Options describes the cluster NewCluster starts.
type Options struct {
	// Members is the number of members; 0 means 1.
	Members int
	// TLS, when set, makes every member serve clients and peers over HTTPS
	// with certificates issued by this CA, and require client certificates
	// (etcd --client-cert-auth and --peer-client-cert-auth). Nil means plain
	// HTTP without authentication.
	TLS *pki.CA
	// LogLevel of the members' zap loggers; "" means "error" (quiet).
	LogLevel string
	// Timing of raft; zero means the fast test timing (TickMs, ElectionMs).
	Timing Timing
	// StallablePeers routes every member's inbound peer traffic through a
	// loopback proxy, so that Member.Stall can silence it. Without it a
	// killed member is not silent at once: its peer listener serves until
	// Close has drained the client connections (seconds), and meanwhile
	// answers the lease renewals the others forward to it from its lessor's
	// memory, although its raft is stopped.
	StallablePeers bool
}

// Cluster is a running test cluster. Its methods may be called from any
// goroutine, except those that take a testing.TB.
type Cluster struct {
	t       testing.TB
	opts    Options
	token   string
	members []*Member
	client  pki.Pair // client certificate (CN "root") used by Client when TLS is on
}

// Member is one etcd server of a Cluster. Stop and Restart keep its name,
// ports and data directory, so a stopped member rejoins as itself.
type Member struct {
	c       *Cluster
	index   int
	name    string
	dir     string
	peerURL url.URL // advertised; the peer proxy's address with StallablePeers
	client  url.URL
	tls     pki.Pair

	peerListen url.URL         // where the member listens for peers
	peerProxy  *tcpproxy.Proxy // nil without StallablePeers

	// stopping is set while Stop runs, so the errors every listener
	// reports when it is closed are not logged as failures.
	stopping atomic.Bool

	mu   sync.Mutex
	etcd *embed.Etcd // nil while stopped
}

// NewCluster starts a cluster and waits until every member is ready (which
// implies a leader was elected). It fails t if the cluster cannot start.
func NewCluster(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "error"
	}
	var err error
	// Ports are picked before any member starts (the initial cluster names
	// every peer URL), so another process may grab one in between; a bind
	// conflict restarts the whole formation on fresh ports.
	for attempt := 1; ; attempt++ {
		c := &Cluster{t: t, opts: opts, token: randomToken()}
		err = c.start()
		if err == nil {
			t.Cleanup(c.Close)
			return c
		}
		c.Close()
		if !errors.Is(err, syscall.EADDRINUSE) || attempt == 5 {
			break
		}
		t.Logf("etcdtest: port conflict, retrying on other ports: %v", err)
	}
	t.Fatalf("etcdtest: start %d-member cluster: %v", opts.Members, err)
	return nil
}

func (c *Cluster) start() error {
	base := c.t.TempDir()
	if c.opts.TLS != nil {
		p, err := c.opts.TLS.Client("root")
		if err != nil {
			return err
		}
		c.client = p
	}
	ports, err := freePorts(2 * c.opts.Members)
	if err != nil {
		return err
	}
	scheme := "http"
	if c.opts.TLS != nil {
		scheme = "https"
	}
	var initial []string
	for i := 0; i < c.opts.Members; i++ {
		m := &Member{
			c:       c,
			index:   i,
			name:    "etcd" + strconv.Itoa(i),
			dir:     fmt.Sprintf("%s/etcd%d", base, i),
			peerURL: url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))},
			client:  url.URL{Scheme: scheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))},
		}
		if c.opts.TLS != nil {
			// The token keeps two clusters sharing one CA directory from
			// overwriting each other's member certificates.
			if m.tls, err = c.opts.TLS.Server("etcd-" + c.token + "-" + strconv.Itoa(i)); err != nil {
				return err
			}
		}
		m.peerListen = m.peerURL
		if c.opts.StallablePeers {
			if m.peerProxy, err = tcpproxy.New(m.peerListen.Host); err != nil {
				return err
			}
			m.peerURL.Host = m.peerProxy.Addr()
		}
		c.members = append(c.members, m)
		initial = append(initial, m.name+"="+m.peerURL.String())
	}
	for _, m := range c.members {
		if err := m.launch(strings.Join(initial, ",")); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, m := range c.members {
		if err := m.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Close kills every member (a graceful stop of all members at once spends
// seconds on leadership transfers to peers that are going away).
// NewCluster registers it with t.Cleanup; calling it again is harmless.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(m.Kill)
	}
	wg.Wait()
	for _, m := range c.members {
		if m.peerProxy != nil {
			_ = m.peerProxy.Close()
		}
	}
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// Member returns member i (0-based).
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Endpoints returns every member's client URL, stopped members included.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.members))
	for i, m := range c.members {
		eps[i] = m.Endpoint()
	}
	return eps
}

// ProxiedEndpoints starts one tcpproxy per member and returns client URLs
// that go through them (same scheme; member certificates cover 127.0.0.1, so
// TLS verifies), plus the group to blackhole them: give each client under
// test its own set to cut it off alone. The proxies close when t ends.
func (c *Cluster) ProxiedEndpoints(t testing.TB) ([]string, *tcpproxy.Group) {
	t.Helper()
	targets := make([]string, len(c.members))
	for i, m := range c.members {
		targets[i] = m.client.Host
	}
	g, err := tcpproxy.NewGroup(targets...)
	if err != nil {
		t.Fatalf("etcdtest: proxies: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	eps := make([]string, len(c.members))
	for i, addr := range g.Addrs() {
		eps[i] = c.members[i].client.Scheme + "://" + addr
	}
	return eps, g
}

// ClientCert is the client certificate (CN "root") that Client uses when TLS
// is on; zero without TLS. Once auth is enabled, a client presenting it
// without a password acts as etcd user root.
func (c *Cluster) ClientCert() pki.Pair { return c.client }

// ClientConfig returns a clientv3 configuration for all endpoints, with TLS
// (CA and the root client certificate) when the cluster uses it, and a quiet
// logger. Callers may adjust it before clientv3.New.
func (c *Cluster) ClientConfig() (clientv3.Config, error) {
	cfg := clientv3.Config{
		Endpoints:            c.Endpoints(),
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
	}
	if c.opts.TLS != nil {
		info := transport.TLSInfo{
			CertFile:      c.client.CertFile,
			KeyFile:       c.client.KeyFile,
			TrustedCAFile: c.opts.TLS.CertFile,
		}
		tlsCfg, err := info.ClientConfig()
		if err != nil {
			return clientv3.Config{}, fmt.Errorf("etcdtest: client TLS: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	return cfg, nil
}

// Client returns a client for all endpoints (see ClientConfig), closed when t
// ends. It fails t if the client cannot be built; it does not wait for a
// connection, so it works while members are down.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: new client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// WaitLeader waits until every running member agrees on one leader that is
// itself running, and returns that member's index. It returns ctx's error if
// that does not happen first (for example while quorum is lost).
func (c *Cluster) WaitLeader(ctx context.Context) (int, error) {
	tick := time.NewTicker(TickMs * time.Millisecond)
	defer tick.Stop()
	for {
		if i, ok := c.leader(); ok {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("etcdtest: no leader: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

func (c *Cluster) leader() (int, bool) {
	var lead uint64
	index := -1
	running := 0
	for _, m := range c.members {
		e := m.running()
		if e == nil {
			continue
		}
		running++
		l := uint64(e.Server.Leader())
		if l == 0 || (lead != 0 && l != lead) {
			return -1, false
		}
		lead = l
		if uint64(e.Server.MemberID()) == l {
			index = m.index
		}
	}
	return index, running > 0 && index >= 0
}

// Name is the member's etcd name ("etcd0", "etcd1", ...).
func (m *Member) Name() string { return m.name }

// Endpoint is the member's client URL; it stays the same across restarts.
func (m *Member) Endpoint() string { return m.client.String() }

// PeerURL is the member's peer URL.
func (m *Member) PeerURL() string { return m.peerURL.String() }

// Running reports whether the member is started.
func (m *Member) Running() bool { return m.running() != nil }

// IsLeader reports whether the member is running and believes it leads.
func (m *Member) IsLeader() bool {
	e := m.running()
	return e != nil && e.Server.Leader() == e.Server.MemberID()
}

func (m *Member) running() *embed.Etcd {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.etcd
}

// Stop shuts the member down gracefully, as etcd does on SIGTERM: a leader
// first hands leadership to a peer. Its listeners close, so clients see
// connection refused. Stopping a stopped member does nothing.
func (m *Member) Stop() { m.stop(false) }

// Kill stops the member abruptly, like a crash: no leadership transfer, the
// others notice only when heartbeats stop. Killing a stopped member does
// nothing.
func (m *Member) Kill() { m.stop(true) }

// Stall makes the member fall silent at once, as a SIGSTOP (or a long fsync
// or GC pause) would: its raft stops (no heartbeats, no leadership
// transfer) and every byte its peers send it is held, so that nothing it
// held in memory (leases) answers them. It needs Options.StallablePeers.
// Unlike a real stall the member's client connections close; Restart
// brings it back from its data directory.
func (m *Member) Stall() error {
	if m.peerProxy == nil {
		return fmt.Errorf("etcdtest: member %s: Stall needs Options.StallablePeers", m.name)
	}
	m.peerProxy.Blackhole(true)
	m.Kill()
	return nil
}

func (m *Member) stop(hard bool) {
	m.mu.Lock()
	e := m.etcd
	m.etcd = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	m.stopping.Store(true)
	defer m.stopping.Store(false)
	if hard {
		// Stopping the raft loop first leaves Close nothing to hand over;
		// Close then releases listeners, connections and files.
		e.Server.HardStop()
	}
	e.Close()
	// Close returns once the server goroutines are done; drain the error
	// channel so nothing is left blocked on it.
	for range e.Err() {
	}
}

// Restart starts a stopped member again from its data directory on the same
// ports and waits until it is ready, which needs a quorum of running
// members: restarting one member of a cluster that lost quorum returns only
// once enough members run. A running member is left alone.
func (m *Member) Restart() error {
	m.mu.Lock()
	running := m.etcd != nil
	m.mu.Unlock()
	if running {
		return nil
	}
	if m.peerProxy != nil {
		m.peerProxy.Blackhole(false) // after Stall
	}
	var err error
	// The ports were free when the member first started; something may have
	// taken one since (for example an outgoing connection's ephemeral port,
	// or a socket still closing), so retry binding for a while.
	for attempt := 0; attempt < 20; attempt++ {
		if err = m.launch(""); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	return m.waitReady(ctx)
}

// launch starts the embedded server without waiting for it to be ready.
// initialCluster is only read on first start (a member with a data directory
// knows its cluster).
func (m *Member) launch(initialCluster string) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenPeerUrls = []url.URL{m.peerListen}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	cfg.ListenClientUrls = []url.URL{m.client}
	cfg.AdvertiseClientUrls = []url.URL{m.client}
	if initialCluster == "" {
		initialCluster = m.name + "=" + m.peerURL.String()
	}
	cfg.InitialCluster = initialCluster
	cfg.InitialClusterToken = "etcdtest-" + m.c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	timing := m.c.opts.Timing.orFast()
	cfg.TickMs = timing.TickMs
	cfg.ElectionMs = timing.ElectionMs
	lg, err := m.logger()
	if err != nil {
		return err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// Durability across a crash of the host is not what these tests are
	// about, and fsync on a shared slow disk makes elections flaky.
	cfg.UnsafeNoFsync = true
	// Passwords are hashed when a user is added, and every login verifies
	// the hash: at the default cost that takes seconds under the race
	// detector on a busy machine, long enough to time logins out.
	cfg.BcryptCost = uint(bcrypt.MinCost)
	if ca := m.c.opts.TLS; ca != nil {
		info := transport.TLSInfo{
			CertFile:       m.tls.CertFile,
			KeyFile:        m.tls.KeyFile,
			TrustedCAFile:  ca.CertFile,
			ClientCertAuth: true,
		}
		cfg.ClientTLSInfo = info
		cfg.PeerTLSInfo = info
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start member %s: %w", m.name, err)
	}
	m.mu.Lock()
	m.etcd = e
	m.mu.Unlock()
	return nil
}

// logger writes JSON to stderr at the cluster's level, tagged with the
// member's name, and drops the serve errors that Close provokes.
func (m *Member) logger() (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(m.c.opts.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("etcdtest: log level: %w", err)
	}
	zc := zap.NewProductionConfig()
	zc.Level = zap.NewAtomicLevelAt(lvl)
	zc.Sampling = nil
	zc.DisableStacktrace = true
	zc.OutputPaths = []string{"stderr"}
	zc.ErrorOutputPaths = []string{"stderr"}
	lg, err := zc.Build(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return &quietClose{Core: c, stopping: &m.stopping}
	}))
	if err != nil {
		return nil, fmt.Errorf("etcdtest: logger: %w", err)
	}
	return lg.With(zap.String("member", m.name)), nil
}

// quietClose drops "serving failed" entries while the member is stopping:
// embed logs one at error level for every listener it closes itself.
type quietClose struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (q *quietClose) With(f []zapcore.Field) zapcore.Core {
	return &quietClose{Core: q.Core.With(f), stopping: q.stopping}
}

func (q *quietClose) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if q.stopping.Load() && strings.HasPrefix(e.Message, "setting up serving from embedded etcd failed") {
		return ce
	}
	if q.Enabled(e.Level) {
		return ce.AddCore(e, q)
	}
	return ce
}

func (m *Member) waitReady(ctx context.Context) error {
	e := m.running()
	if e == nil {
		return fmt.Errorf("etcdtest: member %s is not running", m.name)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcdtest: member %s failed: %w", m.name, err)
	case <-ctx.Done():
		return fmt.Errorf("etcdtest: member %s not ready: %w", m.name, ctx.Err())
	}
}

// Ports come from below the kernel's ephemeral range (32768 and up on Linux)
// so that outgoing connections, which take ephemeral ports, rarely collide
// with a member that is stopped and restarted on the same ports.
const (
	portLow  = 20000
	portHigh = 32000
)

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("etcdtest: no free loopback port in [%d,%d)", portLow, portHigh)
		}
		p := portLow + mrand.IntN(portHigh-portLow)
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

func randomToken() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Isolate cuts the member's raft traffic to and from every other member,
// both ways, as a network partition would: it loses (or, if it led, gives
// up) its leader while clients can still reach it, and answers them like a
// member of a minority. Heal ends it. Peer HTTP that is not raft (such as a
// follower forwarding a lease renewal to the leader) still flows, but a
// member without a leader has nowhere to forward it.
func (m *Member) Isolate() { m.partition(true) }

// Heal undoes Isolate.
func (m *Member) Heal() { m.partition(false) }

func (m *Member) partition(cut bool) {
	e := m.running()
	if e == nil {
		return
	}
	for _, o := range m.c.members {
		oe := o.running()
		if o == m || oe == nil {
			continue
		}
		if cut {
			e.Server.CutPeer(oe.Server.MemberID())
			oe.Server.CutPeer(e.Server.MemberID())
		} else {
			e.Server.MendPeer(oe.Server.MemberID())
			oe.Server.MendPeer(e.Server.MemberID())
		}
	}
}

// HasLeader reports whether the member is running and knows a leader.
func (m *Member) HasLeader() bool {
	e := m.running()
	return e != nil && e.Server.Leader() != 0
}

// ClusterID is the etcd cluster ID the member belongs to (0 while stopped).
func (m *Member) ClusterID() uint64 {
	e := m.running()
	if e == nil {
		return 0
	}
	return uint64(e.Server.Cluster().ID())
}
