package scenario

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Scenario 37 (issue 11.7, the groups' cost), a measurement: etcd's own
// request rate (grpc_server_started_total summed over the members) and the
// members' CPU with the lab's one group (two supervisors) running, then
// with both supervisors stopped; the difference is one group's cost, as
// etcd sees it. Extra groups are not started here (see docs): the figure
// is extrapolated, and BenchmarkGroupRequestRate measures 1-10 groups in
// process.
const groupsWindow = 30 * time.Second

func groupsCost(ctx context.Context, r *Run) error {
	one, err := r.etcdLoad(ctx, groupsWindow)
	if err != nil {
		return err
	}
	fault, _ := r.Fault("both supervisors stopped (etcd's baseline without the group)", func() error {
		for _, n := range lab.MasterNames {
			if _, err := r.Nodes[n].Systemctl(ctx, "stop", lab.SupervisorUnit); err != nil {
				return err
			}
		}
		return nil
	})
	_ = fault
	if err := Sleep(ctx, 3*time.Second); err != nil { // the members' records lapse on their own
		return err
	}
	none, err := r.etcdLoad(ctx, groupsWindow)
	if err != nil {
		return err
	}
	per := one.rate - none.rate
	r.Notef("etcd requests/s with the lab's group: %.1f, without: %.1f; one group (2 supervisors): %.1f req/s; 50 groups: about %.0f req/s",
		one.rate, none.rate, per, 50*per)
	r.Notef("etcd CPU (3 members, share of one core) with the group: %.1f%%, without: %.1f%%; one group: %.2f%% of a core",
		100*one.cpu, 100*none.cpu, 100*(one.cpu-none.cpu))
	r.Metric("window", groupsWindow)
	return nil
}

type etcdWindow struct {
	rate float64 // gRPC requests started per second, all members
	cpu  float64 // CPU seconds per second, all members
}

// etcdLoad measures etcd's request rate and CPU over window.
func (r *Run) etcdLoad(ctx context.Context, window time.Duration) (etcdWindow, error) {
	c, err := r.etcdMetricsClient()
	if err != nil {
		return etcdWindow{}, err
	}
	defer c.CloseIdleConnections()
	req0, cpu0, err := r.etcdCounters(ctx, c)
	if err != nil {
		return etcdWindow{}, err
	}
	start := time.Now()
	if err := Sleep(ctx, window); err != nil {
		return etcdWindow{}, err
	}
	req1, cpu1, err := r.etcdCounters(ctx, c)
	if err != nil {
		return etcdWindow{}, err
	}
	s := time.Since(start).Seconds()
	return etcdWindow{rate: (req1 - req0) / s, cpu: (cpu1 - cpu0) / s}, nil
}

// etcdMetricsClient talks HTTPS to the members from the observer host with
// the lab's own client certificate (issued when the lab's client opened).
func (r *Run) etcdMetricsClient() (*http.Client, error) {
	ca := r.Lab.Etcd.CA
	cert, err := tls.LoadX509KeyPair(filepath.Join(ca.Dir, "client-lab.crt"), filepath.Join(ca.Dir, "client-lab.key"))
	if err != nil {
		return nil, fmt.Errorf("lab client certificate: %w", err)
	}
	obs := r.Lab.Etcd.Observer
	if obs == "" {
		obs = "obs"
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return r.Lab.Topo.DialContext(ctx, obs, network, addr)
		},
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}, nil
}

// etcdCounters sums grpc_server_started_total over the members and reads
// their processes' CPU time (user + system, from /proc).
func (r *Run) etcdCounters(ctx context.Context, c *http.Client) (requests, cpu float64, err error) {
	for _, m := range r.Lab.Etcd.Members {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Lab.Etcd.ClientURL(m)+"/metrics", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("etcd %s /metrics: %w", m, err)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := p.TextToMetricFamilies(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, 0, fmt.Errorf("etcd %s /metrics: %w", m, err)
		}
		for _, s := range mfs["grpc_server_started_total"].GetMetric() {
			requests += s.GetCounter().GetValue()
		}
		t, err := procCPU(filepath.Join(r.Lab.Etcd.RunDir, "etcd-"+m+".pid"))
		if err != nil {
			return 0, 0, err
		}
		cpu += t
	}
	return requests, cpu, nil
}

// procCPU is the user + system CPU seconds of the process in pidFile.
func procCPU(pidFile string) (float64, error) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	// The lab's PID files hold "PID START-TIME".
	pid, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) in parentheses.
	_, rest, ok := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("%s: unexpected /proc stat", pidFile)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: unexpected /proc stat", pidFile)
	}
	const ticks = 100 // USER_HZ on Linux
	return (utime + stime) / ticks, nil
}
