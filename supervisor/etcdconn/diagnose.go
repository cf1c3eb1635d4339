package etcdconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rejectWait is how long diagnose waits after a TLS handshake for the server
// to reject the client's certificate. With TLS 1.3 the server checks it
// after the client considers the handshake done, and says so in an alert
// the client only sees when it reads.
const rejectWait = 500 * time.Millisecond

// opaque reports whether err is one of the errors gRPC gives when it never
// got a working connection (it waits for one until the deadline, then says
// only "context deadline exceeded"), so the cause must be found another way.
func opaque(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.Canceled:
		return true
	}
	return false
}

// diagnoseAll runs diagnose on every endpoint at once and returns the
// findings by endpoint (only endpoints with a finding are present).
func diagnoseAll(ctx context.Context, endpoints []string, tlsCfg *tls.Config, timeout time.Duration) map[string]error {
	var (
		mu  sync.Mutex
		out = map[string]error{}
		wg  sync.WaitGroup
	)
	for _, ep := range endpoints {
		wg.Go(func() {
			if err := diagnose(ctx, ep, tlsCfg, timeout); err != nil {
				mu.Lock()
				out[ep] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return out
}

// diagnose connects to one endpoint the way the client would, without gRPC,
// to name what went wrong: a refused or timed-out TCP connection, a server
// certificate this client does not trust, or a server that rejects the
// client's certificate (or its absence). It returns nil when it finds
// nothing wrong, or cannot tell (unix sockets).
func diagnose(ctx context.Context, endpoint string, tlsCfg *tls.Config, timeout time.Duration) error {
	scheme, host, found := strings.Cut(endpoint, "://")
	if !found {
		scheme, host = "", endpoint
	}
	var useTLS bool
	switch scheme {
	case "http":
	case "https":
		useTLS = true
	case "":
		useTLS = tlsCfg != nil // clientv3 uses TLS for a bare host:port when it has a TLS config
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("TCP connection failed: %w", err)
	}
	defer conn.Close()
	if !useTLS {
		return nil
	}
	cfg := &tls.Config{}
	if tlsCfg != nil {
		cfg = tlsCfg.Clone()
	}
	if cfg.ServerName == "" {
		name, _, err := net.SplitHostPort(host)
		if err != nil {
			name = host
		}
		cfg.ServerName = name
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TLS handshake failed: %w", err)
	}
	_ = tc.SetReadDeadline(time.Now().Add(rejectWait))
	_, err = tc.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return nil // the server kept the connection: TLS is fine
	}
	return fmt.Errorf("server rejected this client's TLS identity: %w", err)
}

// explain appends the diagnosis of an endpoint to err when err itself says
// nothing useful.
func explain(err, finding error) error {
	if finding == nil {
		return err
	}
	return fmt.Errorf("%w (%w)", err, finding)
}
