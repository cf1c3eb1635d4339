package plane

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// BalancerAddr is where each master's local balancer listens, inside the
// master's network namespace (so the containers' components reach it);
// both apiservers' serving certificates name 127.0.0.1.
const BalancerAddr = "127.0.0.1:6444"

// BalancerURL is the components' server in the balanced layout.
const BalancerURL = "https://" + BalancerAddr

// Health checking of the balancer's backends, as an operator would set up
// HAProxy in front of apiservers: GET /readyz every checkEvery, a backend
// is down after fall failures in a row and up again after rise successes.
// Generous on purpose: on the loaded lab machine a healthy apiserver's
// /readyz sometimes takes over a second (seen with 1 s and fall 2: the
// healthy backend marked down on both balancers at once for 1.5 s).
const (
	checkEvery   = 500 * time.Millisecond
	checkTimeout = 2 * time.Second
	fall, rise   = 3, 2
)

// Balancer is a TCP balancer on every master in front of both apiservers:
// the layout where a kubeconfig names a load balancer, not one apiserver
// (scenario 48). It runs in the lab process, its sockets in the master's
// namespace: connections to the apiservers leave from the master's own
// address, so the audit log still names the master that wrote. The
// master's own apiserver is preferred, the other is the backup (HAProxy's
// "backup"); connections to a backend marked down are closed
// ("on-marked-down shutdown-sessions"), or a client-go HTTP/2 connection
// would stay on the apiserver that lost etcd.
type Balancer struct {
	p        *Plane
	backends map[string][]*backend // by master
}

// anotherUp reports whether master m's balancer has a backend up besides be.
func (b *Balancer) anotherUp(m string, be *backend) bool {
	for _, x := range b.backends[m] {
		if x != be && x.isUp() {
			return true
		}
	}
	return false
}

// backend is one apiserver behind one master's balancer.
type backend struct {
	addr  string
	mu    sync.Mutex
	up    bool
	conns map[net.Conn]struct{}
}

// StartBalancer starts a balancer on every master until ctx ends.
func StartBalancer(ctx context.Context, p *Plane) (*Balancer, error) {
	b := &Balancer{p: p, backends: map[string][]*backend{}}
	lns := map[string]net.Listener{}
	for _, m := range lab.MasterNames {
		ln, err := p.Lab.Topo.Listen(m, "tcp", BalancerAddr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns[m] = ln
		for _, to := range []string{m, other(m)} {
			b.backends[m] = append(b.backends[m], &backend{addr: net.JoinHostPort(p.Lab.Topo.Addr(to).String(), "6443"), up: true, conns: map[net.Conn]struct{}{}})
		}
	}
	// Started once the map is complete: the checks read it.
	for m, ln := range lns {
		go func() { <-ctx.Done(); ln.Close() }()
		go b.serve(ctx, m, ln, b.backends[m])
		for _, be := range b.backends[m] {
			go b.check(ctx, m, be)
		}
	}
	return b, nil
}

func (b *Balancer) dial(ctx context.Context, m, addr string) (net.Conn, error) {
	return b.p.Lab.Topo.DialContext(ctx, m, "tcp", addr)
}

func (b *Balancer) serve(ctx context.Context, m string, ln net.Listener, bes []*backend) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go b.proxy(ctx, m, c, bes)
	}
}

// proxy joins client c to the first backend that is up (when none is,
// the first: a failed check is not proof that it cannot answer).
func (b *Balancer) proxy(ctx context.Context, m string, c net.Conn, bes []*backend) {
	be := bes[0]
	for _, x := range bes {
		if x.isUp() {
			be = x
			break
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	s, err := b.dial(dctx, m, be.addr)
	cancel()
	if err != nil {
		c.Close()
		return
	}
	be.track(c, s, true)
	defer be.track(c, s, false)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	c.Close()
	s.Close()
}

func (be *backend) isUp() bool {
	be.mu.Lock()
	defer be.mu.Unlock()
	return be.up
}

func (be *backend) track(c, s net.Conn, add bool) {
	be.mu.Lock()
	defer be.mu.Unlock()
	if add {
		be.conns[c], be.conns[s] = struct{}{}, struct{}{}
	} else {
		delete(be.conns, c)
		delete(be.conns, s)
	}
}

// setUp records a health change; going down closes the backend's
// sessions when there is somewhere else to go (shut).
func (be *backend) setUp(up, shut bool) {
	be.mu.Lock()
	defer be.mu.Unlock()
	be.up = up
	if !up && shut {
		for c := range be.conns {
			c.Close()
		}
	}
}

// check health-checks one backend from master m's namespace.
func (b *Balancer) check(ctx context.Context, m string, be *backend) {
	ca, err := b.p.CA()
	if err != nil {
		b.p.Log.Error("plane: balancer", "err", err)
		return
	}
	client := &http.Client{Timeout: checkTimeout, Transport: &http.Transport{
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return b.dial(ctx, m, addr) },
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}}
	ok, bad := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(checkEvery):
		}
		healthy := readyz(ctx, client, "https://"+be.addr+"/readyz")
		if healthy {
			ok, bad = ok+1, 0
		} else {
			ok, bad = 0, bad+1
		}
		switch up := be.isUp(); {
		case up && bad >= fall:
			b.p.Log.Info("plane: balancer backend down", "master", m, "backend", be.addr)
			be.setUp(false, b.anotherUp(m, be))
		case !up && ok >= rise:
			b.p.Log.Info("plane: balancer backend up", "master", m, "backend", be.addr)
			be.setUp(true, false)
		}
	}
}

// readyz: an apiserver without etcd answers 500 (its etcd check fails) or
// not at all; anonymous access to /readyz is RBAC's public-info-viewer.
func readyz(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
