package etcdconn

import (
	"context"
	"net"
	"net/url"
	"strings"
	"time"
)

// A connection attempt to a member behind a silent partition (a dead
// switch, a link down) sends a SYN that is lost, and the kernel sends it
// again only 1 s after the first, then 3 s after it (Linux's initial
// retransmission timeout, doubling), inside an attempt gRPC keeps for
// dial_timeout: a heal was found up to a second late (lab/etcd
// BenchmarkRenewalAfterSilentHeal: 0.74 s median, 0.13 s with this). The daemon's dialer
// therefore starts a fresh attempt every synRace while the earlier ones
// are still unanswered, and keeps the earlier ones going, so a slow link
// still completes its first attempt (nothing is given up early) and a heal
// is found within synRace. The first attempt that connects wins; the
// others are cancelled, or closed if they connected as well. An attempt
// refused or unreachable ends the dial at once, as gRPC's own dialer did:
// gRPC's backoff redials within about 100 ms (redialParams). The cost
// while a member is silent: one SYN every synRace per connection being
// dialled, at most dial_timeout / synRace sockets at a time.
const synRace = 200 * time.Millisecond

// dialFunc dials network and address, as net.Dialer.DialContext does.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// raceDialer is the gRPC context dialer of the daemon's etcd client: dial
// (net.Dialer's, or a test's) behind raceDial for TCP, called once for a
// unix socket, where no SYN can be lost.
func raceDialer(dial dialFunc) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if path, ok := unixPath(addr); ok {
			return dial(ctx, "unix", path)
		}
		return raceDial(ctx, dial, addr, synRace)
	}
}

// raceDial dials addr over TCP, starting another attempt every `every`
// until one connects, one fails, or ctx ends (gRPC's connect deadline,
// dial_timeout).
func raceDial(ctx context.Context, dial dialFunc, addr string, every time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		conn net.Conn
		err  error
	}
	results := make(chan result)
	pending := 0
	start := func() {
		pending++
		go func() {
			c, err := dial(ctx, "tcp", addr)
			results <- result{c, err}
		}()
	}
	// finish cancels the attempts still running and closes whatever they
	// connect, without making the caller wait for them.
	finish := func(conn net.Conn, err error) (net.Conn, error) {
		cancel()
		go func(n int) {
			for ; n > 0; n-- {
				if r := <-results; r.conn != nil {
					r.conn.Close()
				}
			}
		}(pending)
		return conn, err
	}
	start()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case r := <-results:
			pending--
			return finish(r.conn, r.err)
		case <-tick.C:
			start()
		case <-ctx.Done():
			return finish(nil, ctx.Err())
		}
	}
}

// unixPath is the socket path of a unix target as etcd's resolver hands it
// to gRPC ("unix:relative", "unix:///absolute"), parsed as gRPC's own
// dialer parses it.
func unixPath(addr string) (string, bool) {
	rest, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return "", false
	}
	if !strings.HasPrefix(rest, "/") {
		return rest, true
	}
	u, err := url.Parse(addr)
	if err != nil {
		return rest, true
	}
	if u.Path == "" {
		return u.Host, true
	}
	return u.Path, true
}
