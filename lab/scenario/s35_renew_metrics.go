package scenario

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricsURL is /metrics on a master's own loopback (the default
// http.listen, as leaderURL).
const metricsURL = "http://127.0.0.1:9731/metrics"

// renewHist is kha_renew_duration_seconds of one lease and endpoint: the
// cumulative count at each upper bound, and failures of that lease.
type renewHist struct {
	Bounds []float64 // upper bounds, ascending, +Inf last
	Counts []uint64  // cumulative
}

// renewScrape is one scrape of a supervisor's renewal metrics, keyed by
// lease then endpoint; Failures by lease.
type renewScrape struct {
	Hist     map[string]map[string]renewHist
	Failures map[string]float64
}

// scrapeRenewals reads node's /metrics through its own loopback.
func (e *Env) scrapeRenewals(ctx context.Context, node string) (renewScrape, error) {
	c := e.leaderClient(node)
	defer c.CloseIdleConnections()
	c.Timeout = 5 * time.Second
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL, nil)
	if err != nil {
		return renewScrape{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return renewScrape{}, fmt.Errorf("scrape %s /metrics: %w", node, err)
	}
	defer resp.Body.Close()
	return parseRenewals(resp.Body)
}

func parseRenewals(r io.Reader) (renewScrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return renewScrape{}, fmt.Errorf("parse /metrics: %w", err)
	}
	out := renewScrape{Hist: map[string]map[string]renewHist{}, Failures: map[string]float64{}}
	if mf := mfs["kha_renew_duration_seconds"]; mf != nil {
		for _, m := range mf.GetMetric() {
			lease, ep := label(m, "lease"), label(m, "endpoint")
			var h renewHist
			for _, b := range m.GetHistogram().GetBucket() {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
				h.Counts = append(h.Counts, b.GetCumulativeCount())
			}
			h.Bounds = append(h.Bounds, math.Inf(1))
			h.Counts = append(h.Counts, m.GetHistogram().GetSampleCount())
			if out.Hist[lease] == nil {
				out.Hist[lease] = map[string]renewHist{}
			}
			out.Hist[lease][ep] = h
		}
	}
	if mf := mfs["kha_renew_failures_total"]; mf != nil {
		for _, m := range mf.GetMetric() {
			out.Failures[label(m, "lease")] = m.GetCounter().GetValue()
		}
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// since is the histogram of the observations between before and h.
func (h renewHist) since(before renewHist) renewHist {
	d := renewHist{Bounds: h.Bounds, Counts: make([]uint64, len(h.Counts))}
	for i := range h.Counts {
		d.Counts[i] = h.Counts[i]
		if i < len(before.Counts) {
			d.Counts[i] -= min(before.Counts[i], h.Counts[i])
		}
	}
	return d
}

// total is the number of observations.
func (h renewHist) total() uint64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// quantile estimates q as Prometheus' histogram_quantile does: linear
// within the bucket the rank falls in (the last finite bound for +Inf).
// Coarse: its error is up to a bucket's width.
func (h renewHist) quantile(q float64) time.Duration {
	n := h.total()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	i := sort.Search(len(h.Counts), func(i int) bool { return float64(h.Counts[i]) >= rank })
	if i >= len(h.Bounds)-1 {
		return secs(h.Bounds[len(h.Bounds)-2])
	}
	lo, below := 0.0, uint64(0)
	if i > 0 {
		lo, below = h.Bounds[i-1], h.Counts[i-1]
	}
	in := h.Counts[i] - below
	if in == 0 {
		return secs(h.Bounds[i])
	}
	return secs(lo + (h.Bounds[i]-lo)*(rank-float64(below))/float64(in))
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
