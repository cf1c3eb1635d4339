// Package httpapi is the supervisor's local HTTP endpoint: Prometheus
// metrics, a liveness check for the reconcile loop, a leader check for load
// balancers (200 only on the node that may run the units, like Patroni's
// /primary), a standby check (200 only on a healthy standby, like Patroni's
// /replica) and the status as JSON.
package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Source is what the endpoint reads from the supervisor core. Every method
// is called per request and must be cheap and safe for concurrent use.
type Source interface {
	// Status is served as JSON on /status.
	Status() any
	// Active reports whether this node is active with a valid lease: the one
	// place where the managed units may run.
	Active() bool
	// Standby reports whether this node is registered as a standby: in the
	// group, holding nothing, ready to take over.
	Standby() bool
	// LastTick is when the reconcile loop last completed a pass; zero before
	// the first.
	LastTick() time.Time
}

// ProblemSource is a Source that can also name configuration problems that
// make the member unfit to lead (a managed unit's drop-in overridden):
// /healthz fails while it names any.
type ProblemSource interface {
	Problems() []string
}

// DefaultStaleAfter is how old the last reconcile tick may be before /healthz
// fails: three default poll intervals.
const DefaultStaleAfter = 3 * time.Second

// Option adjusts New.
type Option func(*handler)

// WithStaleAfter sets how old the last tick may be for /healthz to pass;
// use about three poll intervals.
func WithStaleAfter(d time.Duration) Option {
	return func(h *handler) {
		if d > 0 {
			h.staleAfter = d
		}
	}
}

// withClock replaces time.Now (tests).
func withClock(now func() time.Time) Option { return func(h *handler) { h.now = now } }

type handler struct {
	src        Source
	staleAfter time.Duration
	now        func() time.Time
}

// New returns the endpoint's handler: /metrics from reg, /healthz, /leader,
// /standby, /status. A nil reg serves an empty registry.
func New(src Source, reg *prometheus.Registry, opts ...Option) http.Handler {
	h := &handler{src: src, staleAfter: DefaultStaleAfter, now: time.Now}
	for _, o := range opts {
		o(h)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /leader", h.leader)
	mux.HandleFunc("GET /standby", h.standby)
	mux.HandleFunc("GET /status", h.status)
	return mux
}

// healthz passes while the reconcile loop keeps ticking: a wedged loop is
// what the systemd watchdog kills, and this is the same signal for outside
// monitoring.
func (h *handler) healthz(w http.ResponseWriter, _ *http.Request) {
	last := h.src.LastTick()
	if last.IsZero() {
		plain(w, http.StatusServiceUnavailable, "unhealthy: the reconcile loop has not run yet\n")
		return
	}
	age := h.now().Sub(last)
	if age > h.staleAfter {
		plain(w, http.StatusServiceUnavailable, fmt.Sprintf("unhealthy: last reconcile %s ago (limit %s)\n",
			age.Round(time.Millisecond), h.staleAfter))
		return
	}
	if ps, ok := h.src.(ProblemSource); ok {
		if probs := ps.Problems(); len(probs) > 0 {
			plain(w, http.StatusServiceUnavailable, "unhealthy: "+strings.Join(probs, "\nunhealthy: ")+"\n")
			return
		}
	}
	plain(w, http.StatusOK, fmt.Sprintf("ok: last reconcile %s ago\n", max(age, 0).Round(time.Millisecond))+warningLines(h.src)+apiFenceLine(h.src))
}

// leader answers 200 only on the active node with a valid lease, so a load
// balancer's health check sends traffic to the one node running the units.
func (h *handler) leader(w http.ResponseWriter, _ *http.Request) {
	if h.src.Active() {
		plain(w, http.StatusOK, "leader\n")
		return
	}
	plain(w, http.StatusServiceUnavailable, "not leader\n")
}

// standby answers 200 only on a standby whose loop keeps ticking: a member
// that could take over. A stale loop, the leader, and a member starting,
// demoting or fencing all get 503.
func (h *handler) standby(w http.ResponseWriter, _ *http.Request) {
	if !h.src.Standby() {
		plain(w, http.StatusServiceUnavailable, "not standby\n")
		return
	}
	if last := h.src.LastTick(); last.IsZero() || h.now().Sub(last) > h.staleAfter {
		plain(w, http.StatusServiceUnavailable, "standby, but unhealthy: the reconcile loop is stale\n")
		return
	}
	if ps, ok := h.src.(ProblemSource); ok && len(ps.Problems()) > 0 {
		plain(w, http.StatusServiceUnavailable, "standby, but it will not take over: "+strings.Join(ps.Problems(), "; ")+"\n")
		return
	}
	plain(w, http.StatusOK, "standby\n")
}

func (h *handler) status(w http.ResponseWriter, _ *http.Request) {
	b, err := json.MarshalIndent(h.src.Status(), "", "  ")
	if err != nil {
		plain(w, http.StatusInternalServerError, "cannot encode status: "+err.Error()+"\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

func plain(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}
