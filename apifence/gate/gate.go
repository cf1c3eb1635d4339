// Package gate is the per-unit API gate: a loopback HTTPS endpoint that a
// managed unit's kubeconfig points at instead of the apiserver. It
// authenticates the component exactly as the apiserver would (client
// certificate against the cluster CA, or bearer token through a
// TokenReview), and forwards the request under the supervisor's own
// credential with impersonation of the component's user and groups plus
// the extra kha.io/fencing-token = this term's token, only while the term
// is open. Cut closes every connection at once.
//
// The gate is an availability and latency fence, not the safety argument:
// the apiserver's admission policy checking the token is (see
// docs/architecture.md, "The fence at the API server").
package gate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/kha-supervisor/kha-supervisor/apifence/failover"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// TokenExtra is the user extra that carries the fencing token; the
// admission policy compares it with its parameter.
const TokenExtra = "kha.io/fencing-token"

// PolicyName names the token policy and the webhook (apifence.PolicyName);
// their refusals carry it.
const PolicyName = "kha-fencing-token"

// tokenRefusal recognises the token policy's or the webhook's refusal (422
// naming PolicyName), and an apiserver's failure to call the token webhook
// (500: its node's supervisor is stopped or frozen, and failurePolicy Fail
// refuses every managed write there). Nothing was stored, and another
// apiserver may admit the same write.
func tokenRefusal(status int, body []byte) bool {
	switch status {
	case http.StatusUnprocessableEntity:
		return bytes.Contains(body, []byte(PolicyName))
	case http.StatusInternalServerError:
		// JSON escapes the quotes around the name, protobuf (the
		// components' usual encoding) does not.
		return bytes.Contains(body, []byte("failed calling webhook")) && bytes.Contains(body, []byte(PolicyName+".kha.io"))
	}
	return false
}

// copyBufferSize is the proxy's copy buffer: large enough for a LIST to
// stream at hundreds of MB/s, small enough for dozens of idle watches.
const copyBufferSize = 8 << 10

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// copyBuffers is the proxy's httputil.BufferPool.
type copyBuffers struct{}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// Term is the supervisor's view, asked when a request arrives and again
// right before it leaves for the apiserver. Open means: this node holds
// the lease, is past the promotion barrier, units may run, and the fence
// deadline has not passed. Token is the term's fencing token.
type Term struct {
	Open   bool
	Token  int64
	Reason string // why not open, for the component's log
}

// TermFunc must be cheap and safe to call from any goroutine.
type TermFunc func() Term

// Config is one gate.
type Config struct {
	Unit      string          // the managed unit it serves, for logs and errors
	Listen    string          // loopback host:port; "127.0.0.1:0" if empty
	Serving   tls.Certificate // from localca
	ClientCAs *x509.CertPool  // the cluster CA: client certificates are verified against it
	// Upstream is the supervisor's own credential and the apiserver to
	// forward to. Its Impersonate field must be empty.
	Upstream *rest.Config
	// Upstreams, if set, replaces Upstream: the same credential for every
	// apiserver, in order of preference; a request goes to the first that
	// gives a connection (package failover).
	Upstreams []*rest.Config
	Term      TermFunc
	// Reviewer checks bearer tokens; nil builds a cached TokenReview client
	// from Upstream.
	Reviewer Reviewer
	// Peers, if set, admits only connections from processes in Unit's
	// cgroup (peer.go); others get 403. OnStranger, if set, hears of each
	// refused connection.
	Peers      Peers
	OnStranger func(Peer, error)
	Log        *slog.Logger
}

// Gate is one running gate. Create with Listen.
type Gate struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	conns  *conns
	srv    *http.Server
	proxy  *httputil.ReverseProxy
	base   *failover.Set
	review Reviewer

	mu     sync.Mutex
	epoch  context.Context // cancelled by Cut: every request in flight ends
	cancel context.CancelFunc

	refused atomic.Int64 // connections refused for their process
}

// Listen checks cfg, binds the loopback port and returns the gate; call
// Serve to start answering.
func Listen(cfg Config) (*Gate, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	// Bodies pass through as the apiserver sent them: with compression
	// enabled the upstream transport would ask for gzip itself whenever
	// the component did not, and inflate each answer in the gate (seen:
	// a quarter of the leader's heap in flate dictionaries, one per open
	// watch). A component that asks for gzip still gets it, compressed.
	ups := cfg.upstreams()
	for i, u := range ups {
		ups[i] = rest.CopyConfig(u)
		ups[i].DisableCompression = true
	}
	base, err := failover.New(ups, failover.Options{Retry: tokenRefusal})
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", cfg.Unit, err)
	}
	u := base.First()
	rev := cfg.Reviewer
	if rev == nil {
		rev = newTokenReviewer(kubeapi.FromHTTP(base.Client(), u.String()))
	}
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", cfg.Unit, err)
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	g := &Gate{cfg: cfg, log: log.With("gate", cfg.Unit), base: base, review: rev, conns: newConns()}
	g.ln = g.conns.listener(raw)
	g.epoch, g.cancel = context.WithCancel(context.Background())
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { rewrite(pr, u) },
		Transport:     sender{g},
		FlushInterval: -1, // watches stream: every write goes out at once
		// Each open watch holds its copy buffer for its whole life (the
		// controller-manager keeps dozens): 8 kB instead of the default
		// 32 kB, pooled across requests.
		BufferPool:   copyBuffers{},
		ErrorHandler: g.proxyError,
		ErrorLog:     slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
	g.srv = &http.Server{
		Handler:           http.HandlerFunc(g.serve),
		ConnContext:       g.connContext, // peer.go
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cfg.Serving},
			ClientAuth:   tls.VerifyClientCertIfGiven, // as the apiserver: a certificate, if given, must verify
			ClientCAs:    cfg.ClientCAs,
			MinVersion:   tls.VersionTLS12,
		},
	}
	return g, nil
}

func (c Config) check() error {
	var missing []string
	if c.Unit == "" {
		missing = append(missing, "Unit")
	}
	if len(c.Serving.Certificate) == 0 {
		missing = append(missing, "Serving")
	}
	if c.ClientCAs == nil {
		missing = append(missing, "ClientCAs")
	}
	ups := c.upstreams()
	if len(ups) == 0 || slices.ContainsFunc(ups, func(u *rest.Config) bool { return u == nil || u.Host == "" }) {
		missing = append(missing, "Upstream")
	}
	if c.Term == nil {
		missing = append(missing, "Term")
	}
	if len(missing) > 0 {
		return fmt.Errorf("gate: missing %s", strings.Join(missing, ", "))
	}
	for _, u := range ups {
		if u.Impersonate.UserName != "" {
			return fmt.Errorf("gate %s: the supervisor's own credential must not impersonate (it has Impersonate %q)", c.Unit, u.Impersonate.UserName)
		}
	}
	if host, _, err := net.SplitHostPort(c.Listen); c.Listen != "" && (err != nil || !isLoopback(host)) {
		return fmt.Errorf("gate %s: listen %q must be a loopback host:port", c.Unit, c.Listen)
	}
	return nil
}

func (c Config) upstreams() []*rest.Config {
	if len(c.Upstreams) > 0 {
		return c.Upstreams
	}
	if c.Upstream == nil {
		return nil
	}
	return []*rest.Config{c.Upstream}
}

// Upstreams are the apiservers this gate forwards to, in order, and those
// marked down by a failed connection.
func (g *Gate) Upstreams() (hosts, down []string) { return g.base.Hosts(), g.base.Down() }

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Unit is the unit this gate serves.
func (g *Gate) Unit() string { return g.cfg.Unit }

// Addr is the bound address, e.g. 127.0.0.1:41234.
func (g *Gate) Addr() string { return g.ln.Addr().String() }

// URL is what the unit's kubeconfig names as server.
func (g *Gate) URL() string { return "https://" + g.Addr() }

// Serve answers until Close. It returns nil after Close.
func (g *Gate) Serve() error {
	err := g.srv.ServeTLS(g.ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Cut ends every connection and every request in flight at once. It closes
// the raw TCP connections rather than the TLS ones: tls.Conn.Close sends
// close_notify first, which blocks on a peer that does not read. The gate
// keeps listening; new requests are refused while the term is closed.
func (g *Gate) Cut() int {
	g.mu.Lock()
	g.cancel()
	g.epoch, g.cancel = context.WithCancel(context.Background())
	g.mu.Unlock()
	return g.conns.closeAll()
}

// Close stops listening and cuts every connection. The server is closed
// first, so that Serve returns nil rather than the listener's error.
func (g *Gate) Close() error {
	err := g.srv.Close()
	g.Cut()
	return err
}

func (g *Gate) currentEpoch() context.Context {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.epoch
}

// forward is what the handler decided, carried to the sender.
type forward struct {
	user  User
	token int64
}

type forwardKey struct{}

// serve: term first (a standby does no work at all, not even a
// TokenReview), then authentication, then the proxy.
func (g *Gate) serve(w http.ResponseWriter, r *http.Request) {
	t := g.cfg.Term()
	if !t.Open {
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("kha-supervisor gate for %s: this node's term is not open: %s", g.cfg.Unit, t.Reason))
		return
	}
	if p, err := g.checkPeer(r.Context()); err != nil {
		writeStatus(w, http.StatusForbidden, "Forbidden",
			fmt.Sprintf("kha-supervisor gate for %s: refused: %v (%s); only the unit's own processes may use its gate", g.cfg.Unit, err, p))
		return
	}
	user, err := g.authenticate(r)
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		g.log.Info("refused an unauthenticated request", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(g.currentEpoch(), cancel)
	defer stop()
	ctx = context.WithValue(ctx, forwardKey{}, forward{user: user, token: t.Token})
	g.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// errFenced is what the sender returns when the term closed (or moved on)
// between the request's arrival and its departure.
var errFenced = errors.New("the term closed before the request could leave")

// sender is the last hop: it asks the term again, then sends with
// client-go's impersonating round tripper over the supervisor's transport.
type sender struct{ g *Gate }

func (s sender) RoundTrip(r *http.Request) (*http.Response, error) {
	f, ok := r.Context().Value(forwardKey{}).(forward)
	if !ok {
		return nil, errors.New("gate: request without an authenticated user")
	}
	if t := s.g.cfg.Term(); !t.Open || t.Token != f.token {
		return nil, errFenced
	}
	imp := transport.ImpersonationConfig{
		UserName: f.user.Name,
		Groups:   f.user.Groups,
		Extra:    map[string][]string{TokenExtra: {strconv.FormatInt(f.token, 10)}},
	}
	return transport.NewImpersonatingRoundTripper(imp, s.g.base).RoundTrip(r)
}

// rewrite points the outgoing request at the apiserver and drops every
// credential the client sent: its own Authorization (the supervisor's
// credential replaces it) and any Impersonate-* or X-Remote-* header, which
// would otherwise let a client choose its identity or token.
func rewrite(pr *httputil.ProxyRequest, upstream *url.URL) {
	pr.SetURL(upstream)
	pr.Out.Host = upstream.Host
	StripIdentity(pr.Out.Header)
}

// StripIdentity removes every header a client could use to claim an
// identity from a request the gate forwards.
func StripIdentity(h http.Header) {
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		if ck == "Authorization" || ck == "Proxy-Authorization" ||
			strings.HasPrefix(ck, "Impersonate-") || strings.HasPrefix(ck, "X-Remote-") {
			delete(h, k)
		}
	}
}

func (g *Gate) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errFenced):
		writeStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable",
			fmt.Sprintf("kha-supervisor gate for %s: %v", g.cfg.Unit, err))
	case errors.Is(err, context.Canceled):
		// Cut, or the client went away: nothing to answer to.
	default:
		g.log.Warn("upstream request failed", "path", r.URL.Path, "err", err)
		writeStatus(w, http.StatusBadGateway, "InternalError", fmt.Sprintf("kha-supervisor gate for %s: upstream: %v", g.cfg.Unit, err))
	}
}

// writeStatus answers with a metav1.Status, which client-go decodes into a
// proper API error.
func writeStatus(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%s,"reason":%q,"code":%d}`+"\n",
		strconv.Quote(msg), reason, code)
}
