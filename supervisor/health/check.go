// Package health probes the managed units' own health endpoints (an HTTP(S)
// GET such as kube-scheduler's /healthz), so that a component that systemd
// reports active but that has stopped answering counts as a unit failure on
// the leader. It knows nothing about leadership: the supervisor arms a
// unit's probe while it leads and the unit runs, and takes the failures.
package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Result is one probe's outcome.
type Result struct {
	At      time.Time     `json:"at"`
	OK      bool          `json:"ok"`
	Code    int           `json:"code,omitempty"`  // HTTP status, 0 when there was no answer
	Error   string        `json:"error,omitempty"` // why it failed
	Latency time.Duration `json:"latency_ns"`
}

// Checker runs one GET against one URL. A 2xx answer within the timeout is
// healthy; anything else (no answer, a TLS failure, another status) is not.
type Checker struct {
	url     string
	timeout time.Duration
	client  *http.Client
}

// TLS is how a Checker trusts an https URL: Roots (the CA bundle), or
// Insecure (no verification at all), never neither.
type TLS struct {
	Roots    *x509.CertPool
	Insecure bool
}

// NewChecker builds the checker of rawURL. An https URL needs Roots or
// Insecure: there is no silent fall-back to the system roots, since the
// components serve certificates of the cluster's own CA or self-signed ones.
func NewChecker(rawURL string, t TLS, timeout time.Duration) (*Checker, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("health: %q is not an absolute URL", rawURL)
	}
	if timeout <= 0 {
		return nil, errors.New("health: timeout must be positive")
	}
	tr := &http.Transport{
		// A fresh connection per probe: a kept-alive connection to a
		// process that has since been replaced would test nothing.
		DisableKeepAlives: true,
		Proxy:             nil,
	}
	switch u.Scheme {
	case "http":
	case "https":
		if t.Roots == nil && !t.Insecure {
			return nil, fmt.Errorf("health: %s: https needs a CA or insecure", rawURL)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: t.Roots, InsecureSkipVerify: t.Insecure, MinVersion: tls.VersionTLS12} //nolint:gosec // only when configured so
	default:
		return nil, fmt.Errorf("health: %s: scheme must be http or https", rawURL)
	}
	return &Checker{url: rawURL, timeout: timeout, client: &http.Client{
		Transport: tr,
		// A redirect is an answer, not a reason to go elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}, nil
}

// URL returns the probed URL.
func (c *Checker) URL() string { return c.url }

// Timeout is how long one probe waits for its answer.
func (c *Checker) Timeout() time.Duration { return c.timeout }

// Check runs one probe, bounded by the timeout.
func (c *Checker) Check(ctx context.Context) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r := Result{At: start}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	resp, err := c.client.Do(req)
	if err != nil {
		r.Latency = time.Since(start)
		r.Error = err.Error()
		if ctx.Err() == context.DeadlineExceeded {
			r.Error = fmt.Sprintf("no answer within %s", c.timeout)
		}
		return r
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	r.Latency, r.Code = time.Since(start), resp.StatusCode
	r.OK = resp.StatusCode >= 200 && resp.StatusCode < 300
	if !r.OK {
		r.Error = fmt.Sprintf("HTTP %d: %.200q", resp.StatusCode, body)
	}
	return r
}
