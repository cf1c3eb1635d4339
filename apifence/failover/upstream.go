// Package failover is failover between the apiservers the supervisor knows
// (api_fence.apiservers): one http.RoundTripper over client-go transports,
// one per apiserver, that sends each request to the first apiserver in the
// configured order that is not marked down, and moves on to the next when
// no connection could be had. Health is judged by connection failures
// only: an apiserver that answers, whatever the status, is up.
package failover

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// Defaults for Options.
const (
	DefaultHold        = 5 * time.Second
	DefaultDialTimeout = 3 * time.Second
)

// Options tune a Set.
type Options struct {
	// Hold is how long an apiserver that failed is tried only after the
	// others; DefaultHold if zero.
	Hold time.Duration
	// DialTimeout bounds a TCP connect, so that a silent (cut off) apiserver
	// costs that long and not client-go's 30 s; DefaultDialTimeout if zero.
	DialTimeout time.Duration
	// Retry, if set, recognises an answer that stored nothing and that
	// another apiserver may not give (the token policy's refusal from an
	// apiserver whose parameter cache is behind, or its failure to call
	// the token webhook of its node): the request goes on to
	// the next apiserver, if its body can be sent again, and the one that
	// answered so is tried after the others while held down. It sees the
	// status and the first MaxRefusal bytes of the body.
	Retry func(status int, body []byte) bool
}

// Set is the failover round tripper. Safe for concurrent use.
type Set struct {
	hosts []*url.URL
	rts   []http.RoundTripper
	hold  time.Duration
	now   func() time.Time
	retry func(status int, body []byte) bool

	mu   sync.Mutex
	down []time.Time // marked down until
}

// New builds a Set from configs that differ only in Host (the supervisor's
// credential, one per apiserver). Their Impersonate must be empty: the
// caller wraps the Set in its own impersonating round tripper.
func New(cfgs []*rest.Config, o Options) (*Set, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("failover: no apiserver")
	}
	if o.Hold <= 0 {
		o.Hold = DefaultHold
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	s := &Set{hold: o.Hold, now: time.Now, down: make([]time.Time, len(cfgs)), retry: o.Retry}
	for _, c := range cfgs {
		u, err := url.Parse(c.Host)
		if err != nil || u.Host == "" || u.Scheme == "" {
			return nil, fmt.Errorf("failover: apiserver %q is not a URL", c.Host)
		}
		c = rest.CopyConfig(c)
		if c.Dial == nil {
			c.Dial = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
		}
		rt, err := rest.TransportFor(c)
		if err != nil {
			return nil, fmt.Errorf("failover: transport for %s: %w", c.Host, err)
		}
		s.hosts = append(s.hosts, u)
		s.rts = append(s.rts, rt)
	}
	return s, nil
}

// Hosts are the apiservers in the configured order.
func (s *Set) Hosts() []string {
	out := make([]string, len(s.hosts))
	for i, u := range s.hosts {
		out[i] = u.String()
	}
	return out
}

// First is the first configured apiserver: the host a request is built
// for before RoundTrip picks the real one.
func (s *Set) First() *url.URL { u := *s.hosts[0]; return &u }

// order is the configured order with the apiservers marked down moved to
// the end (still tried: when all are down, one may be back).
func (s *Set) order() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var up, down []int
	for i, until := range s.down {
		if now.Before(until) {
			down = append(down, i)
		} else {
			up = append(up, i)
		}
	}
	return append(up, down...)
}

func (s *Set) mark(i int, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if failed {
		s.down[i] = s.now().Add(s.hold)
	} else {
		s.down[i] = time.Time{}
	}
}

// Down reports which apiservers are marked down now, by host.
func (s *Set) Down() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, until := range s.down {
		if s.now().Before(until) {
			out = append(out, s.hosts[i].String())
		}
	}
	return out
}

// MaxReplay is the largest request body kept in memory so that the
// request can be sent again: the managed components' writes are small
// (bindings, status updates); a larger or unsized body streams through and
// is sent again only if it never got a connection.
const MaxReplay = 1 << 20

// RoundTrip sends r to the first apiserver that gives a connection. A
// request is sent on to the next apiserver only if none of it can have
// reached this one: it never got a connection (httptrace's GotConn did not
// fire), or the transport's last attempt failed to dial. The transport
// itself re-sends on a fresh connection only when not a byte went out on a
// pooled connection that had died (it counts what reached the socket), so
// a dial error after GotConn still means nothing arrived; the body is
// replayable for that (GetBody) when it is small. Then even a
// non-idempotent write is safe to send again. Any other failure is
// returned as it is (the client retries as it would against the
// apiserver). Every failure marks the apiserver down. An answer that
// Options.Retry recognises (nothing stored) goes on to the next apiserver
// in the same way, but for the last one tried, whose answer is returned.
func (s *Set) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := replayable(r)
	if err != nil {
		return nil, err
	}
	var errs []error
	// held is a refusal Options.Retry sent on: the answer if no other
	// apiserver gives a better one.
	var held *http.Response
	answer := func(err error) (*http.Response, error) {
		if held != nil {
			return held, nil
		}
		return nil, err
	}
	order := s.order()
	for n, i := range order {
		resp, gotConn, err := s.try(r, i, body)
		if err == nil {
			if n < len(order)-1 && !body.consumed() && s.refused(resp) {
				// Nothing was stored there: the next apiserver may admit it.
				s.mark(i, true)
				if held != nil {
					_ = held.Body.Close()
				}
				held = resp
				continue
			}
			s.mark(i, false)
			if held != nil {
				_ = held.Body.Close()
			}
			return resp, nil
		}
		if r.Context().Err() != nil {
			return answer(err)
		}
		s.mark(i, true)
		errs = append(errs, fmt.Errorf("%s: %w", s.hosts[i].Host, err))
		if (gotConn && !isDial(err)) || body.consumed() {
			return answer(err)
		}
	}
	return answer(fmt.Errorf("no apiserver answered: %w", errors.Join(errs...)))
}

// MaxRefusal is how much of an answer's body Options.Retry sees.
const MaxRefusal = 64 << 10

// refused reports whether resp is an answer Options.Retry sends on. It
// reads the body of an error answer (at most MaxRefusal bytes) and puts
// back what it read, so that the answer can still be returned whole.
func (s *Set) refused(resp *http.Response) bool {
	if s.retry == nil || resp.StatusCode < 400 {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, MaxRefusal))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return err == nil && s.retry(resp.StatusCode, head)
}

func (s *Set) try(r *http.Request, i int, body *replayBody) (*http.Response, bool, error) {
	var got atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { got.Store(true) }}
	out := r.Clone(httptrace.WithClientTrace(r.Context(), trace))
	u := *s.hosts[i]
	out.URL.Scheme, out.URL.Host, out.Host = u.Scheme, u.Host, u.Host
	if body != nil {
		out.Body, out.GetBody = body.get()
	}
	resp, err := s.rts[i].RoundTrip(out)
	return resp, got.Load(), err
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// replayBody is a request body for several tries: small ones in memory
// (each try and each GetBody reads them afresh), larger ones streamed once.
type replayBody struct {
	data   []byte        // the whole body, if small
	stream io.ReadCloser // otherwise
	used   atomic.Bool   // the stream was handed to a try that read from it
}

func replayable(r *http.Request) (*replayBody, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength < 0 || r.ContentLength > MaxReplay {
		return &replayBody{stream: r.Body}, nil
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxReplay+1))
	_ = r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("failover: read the request body: %w", err)
	}
	return &replayBody{data: data}, nil
}

func (b *replayBody) get() (io.ReadCloser, func() (io.ReadCloser, error)) {
	if b.stream == nil {
		fresh := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.data)), nil }
		rc, _ := fresh()
		return rc, fresh
	}
	return &streamReader{b}, nil
}

func (b *replayBody) consumed() bool { return b != nil && b.used.Load() }

// streamReader marks the stream used on the first read and keeps the
// transport from closing it (a try that never connected leaves it whole).
type streamReader struct{ b *replayBody }

func (s *streamReader) Read(p []byte) (int, error) {
	s.b.used.Store(true)
	return s.b.stream.Read(p)
}

func (s *streamReader) Close() error { return nil }

// CloseIdleConnections drops every pooled connection (client-go's wrapped
// transports unwrapped by utilnet).
func (s *Set) CloseIdleConnections() {
	for _, rt := range s.rts {
		utilnet.CloseIdleConnectionsFor(rt)
	}
}

// Client is an http.Client over the Set.
func (s *Set) Client() *http.Client { return &http.Client{Transport: s} }
