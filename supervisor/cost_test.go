package supervisor_test

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// BenchmarkGroupRequestRate measures what kha-supervisor costs the etcd it
// shares with the apiserver: the gRPC requests per second that one group
// (a leader and a standby, fast profile) sends, with 1, 5 and 10 groups on
// one cluster, so operators can see how the cost grows with the number of
// groups. Run: go test -run '^$' -bench GroupRequestRate -benchtime 1x ./supervisor/
func BenchmarkGroupRequestRate(b *testing.B) {
	for _, groups := range []int{1, 5, 10} {
		b.Run(fmt.Sprintf("groups=%d", groups), func(b *testing.B) {
			for range b.N {
				perGroup := groupRequestRate(b, groups, 10*time.Second)
				b.ReportMetric(perGroup, "req/s/group")
				b.ReportMetric(perGroup*float64(groups), "req/s")
			}
		})
	}
}

func groupRequestRate(b *testing.B, groups int, over time.Duration) float64 {
	w := supervisortest.NewWorld(b, 3)
	var all []*supervisortest.Member
	for g := range groups {
		cluster := fmt.Sprintf("g%02d", g)
		for _, n := range []string{"a", "b"} {
			all = append(all, w.Start(cluster+"-"+n, func(c *config.Config) { c.Cluster = cluster }))
		}
	}
	supervisortest.WaitFor(b, "a leader in every group", 60*time.Second, func() bool {
		active := 0
		for _, m := range all {
			if m.State() == group.Active {
				active++
			}
		}
		return active == groups
	})
	time.Sleep(2 * time.Second) // past the start-up's own requests
	before := grpcStarted(b, w)
	start := time.Now()
	time.Sleep(over)
	return float64(grpcStarted(b, w)-before) / time.Since(start).Seconds() / float64(groups)
}

// grpcStarted reads etcd's own count of gRPC requests started. The members
// run in this process and share one metrics registry, so one member's
// /metrics has every member's requests.
func grpcStarted(b *testing.B, w *supervisortest.World) int64 {
	resp, err := http.Get(w.Cluster.Member(0).Endpoint() + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var total int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_started_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatalf("metrics line %q: %v", line, err)
		}
		total += int64(v)
	}
	return total
}
