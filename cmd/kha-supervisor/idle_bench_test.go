package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kha-supervisor/kha-supervisor/fencing/guard"
)

// BenchmarkIdle measures what an idle group costs, on the end-to-end set-up
// (the packaged service in two nspawn containers, a three-member etcd):
//
//   - RSS (VmRSS) and CPU ((utime+stime) / wall time, all threads) of the
//     leader's and the standby's kha-supervisor process, sampled over the
//     window;
//   - etcd requests per second: gRPC messages the etcd servers received
//     (grpc_server_msg_received_total: one per unary call, one per message
//     on a stream, so every lease keepalive counts), over the window with
//     both supervisors running, then again with the standby's supervisor
//     stopped; the standby's share is the difference;
//   - the guard: p50/p99 of one round trip to the leader's guard socket
//     (dial, peer check, answer), and of the whole kha-guard exec as
//     ExecStartPre= runs it (fork, exec, config load, round trip),
//     timed inside the container by bash's $EPOCHREALTIME.
//
// It takes several minutes and reports rather than asserts (the machine is
// shared): run it by hand with
//
//	go test -run '^$' -bench Idle -benchtime 1x -timeout 30m ./cmd/kha-supervisor
//
// KHA_IDLE_WINDOW (a Go duration, default 60s) sets the sampling window.
// The managed units run their own executables (e2eProfile.Binaries), so
// that the stray scan and the exec watch have something to look for;
// KHA_IDLE_EXEC_WATCH=off measures the supervisor without the exec watch.
func BenchmarkIdle(b *testing.B) {
	for _, p := range []e2eProfile{e2eDefault, e2eFast} {
		p.Binaries = true
		switch v := os.Getenv("KHA_IDLE_EXEC_WATCH"); v {
		case "", "on":
		case "off":
			p.NoExecWatch = true
		default:
			b.Fatalf("KHA_IDLE_EXEC_WATCH=%q: want on or off", v)
		}
		b.Run(p.Name, func(b *testing.B) { benchIdle(b, p) })
	}
}

// Samples of the guard.
const (
	guardSocketSamples = 1000
	guardExecSamples   = 300
)

func benchIdle(b *testing.B, p e2eProfile) {
	window := time.Minute
	if v := os.Getenv("KHA_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("KHA_IDLE_WINDOW: %v", err)
		}
		window = d
	}
	c := newE2ECluster(b, p)
	leader, standby, cs := c.waitStable(90 * time.Second)
	// Start-up transients (the first campaign, record writes) are not idle.
	time.Sleep(5 * time.Second)
	b.Logf("profile %s: leader %s, standby %s, token %d; load average before: %s", p.Name, leader.name, standby.name, cs.Token, loadavg(b))

	for b.Loop() {
		// Both running.
		procs := []*idleProc{newIdleProc(b, leader), newIdleProc(b, standby)}
		both := measureEtcd(b, window, func() {
			for _, pr := range procs {
				pr.sample()
			}
		})
		for _, pr := range procs {
			pr.finish()
		}
		if l, _, _ := c.waitStable(10 * time.Second); l != leader {
			b.Fatalf("leadership moved during the window: %s", l.name)
		}

		// The leader alone.
		standby.systemctl("stop", e2eSupervisor)
		time.Sleep(3 * time.Second)
		alone := measureEtcd(b, window, nil)
		standby.systemctl("start", e2eSupervisor)
		if l, _, _ := c.waitStable(60 * time.Second); l != leader {
			b.Fatalf("leadership moved while the standby was stopped: %s", l.name)
		}
		load := loadavg(b)
		// The idle figures first: the guard's 300 execs below may time out
		// on a loaded machine.
		fmt.Printf("idle (profile %s, exec watch %v, window %s): leader RSS %.1f MiB CPU %.2f %%, standby RSS %.1f MiB CPU %.2f %%, load %s\n",
			p.Name, !p.NoExecWatch, window, procs[0].rssMiB(), procs[0].cpuPct(), procs[1].rssMiB(), procs[1].cpuPct(), load)

		// The guard, on the idle group.
		sockAllow := guardSocket(b, leader, true)
		sockRefuse := guardSocket(b, standby, false)
		execAllow := guardExec(b, leader, 0)
		execRefuse := guardExec(b, standby, exitGuardRefused)
		// What any exec of the binary costs, for comparison.
		execBase := timeExecs(b, leader, e2eBinary+" version", 0)

		lp, sp := procs[0], procs[1]
		bothRate, aloneRate := both.rate(), alone.rate()
		b.ReportMetric(lp.rssMiB(), "leader_rss_MiB")
		b.ReportMetric(sp.rssMiB(), "standby_rss_MiB")
		b.ReportMetric(lp.cpuPct(), "leader_cpu_pct")
		b.ReportMetric(sp.cpuPct(), "standby_cpu_pct")
		b.ReportMetric(aloneRate, "leader_etcd_req_per_s")
		b.ReportMetric(bothRate-aloneRate, "standby_etcd_req_per_s")
		b.ReportMetric(bothRate, "etcd_req_per_s")
		b.ReportMetric(msf(percentile(execAllow, 50)), "guard_p50_ms")
		b.ReportMetric(msf(percentile(execAllow, 99)), "guard_p99_ms")
		b.ReportMetric(msf(percentile(sockAllow, 50)), "guard_sock_p50_ms")
		b.ReportMetric(msf(percentile(sockAllow, 99)), "guard_sock_p99_ms")

		var t strings.Builder
		fmt.Fprintf(&t, "profile %s (TTL %s, renew %s, poll %s, exec watch %v), window %s\n", p.Name, p.TTL, p.Renew, p.Poll, !p.NoExecWatch, window)
		fmt.Fprintf(&t, "%-26s %12s %12s\n", "", "leader", "standby")
		fmt.Fprintf(&t, "%-26s %12.1f %12.1f\n", "RSS MiB (mean)", lp.rssMiB(), sp.rssMiB())
		fmt.Fprintf(&t, "%-26s %12.1f %12.1f\n", "RSS MiB (max)", lp.rssMax/1024, sp.rssMax/1024)
		fmt.Fprintf(&t, "%-26s %12.2f %12.2f\n", "CPU % of one core", lp.cpuPct(), sp.cpuPct())
		fmt.Fprintf(&t, "%-26s %12.2f %12.2f\n", "etcd requests/s", aloneRate, bothRate-aloneRate)
		fmt.Fprintf(&t, "etcd requests/s with both running: %.2f (RPCs started/s %.2f); leader alone: %.2f (RPCs %.2f)\n",
			bothRate, both.rpcRate(), aloneRate, alone.rpcRate())
		fmt.Fprintf(&t, "  by method, both running: %s\n", both.byMethod())
		fmt.Fprintf(&t, "  by method, leader alone: %s\n", alone.byMethod())
		for _, g := range []struct {
			what string
			lat  []time.Duration
		}{
			{"guard socket round trip, allowed (leader)", sockAllow},
			{"guard socket round trip, refused (standby)", sockRefuse},
			{"guard exec, allowed (leader)", execAllow},
			{"guard exec, refused (standby)", execRefuse},
			{"baseline: exec of kha-supervisor version", execBase},
		} {
			fmt.Fprintf(&t, "%-44s n=%4d  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", g.what, len(g.lat),
				msf(percentile(g.lat, 50)), msf(percentile(g.lat, 99)), msf(slices.Max(g.lat)))
		}
		fmt.Fprintf(&t, "load average: %s (after the windows), %s (after the guard)\n", load, loadavg(b))
		// Printed, not logged: the testing package cuts a benchmark's log
		// to a few lines unless -v.
		fmt.Print(t.String())
	}
}

// idleProc samples one supervisor process.
type idleProc struct {
	b          testing.TB
	node       *e2eNode
	pid        int
	start      time.Time
	ticks0     int64
	ticks      int64
	wall       time.Duration
	rssSum     float64 // KiB
	rssMax     float64
	rssSamples int
}

func newIdleProc(b testing.TB, n *e2eNode) *idleProc {
	pr := &idleProc{b: b, node: n, pid: n.supervisorPID(), start: time.Now()}
	pr.ticks0 = cpuTicks(b, pr.pid)
	return pr
}

func (pr *idleProc) sample() {
	kib := vmRSS(pr.b, pr.pid)
	pr.rssSum += kib
	pr.rssMax = max(pr.rssMax, kib)
	pr.rssSamples++
}

func (pr *idleProc) finish() {
	pr.ticks = cpuTicks(pr.b, pr.pid) - pr.ticks0
	pr.wall = time.Since(pr.start)
	if now := pr.node.supervisorPID(); now != pr.pid {
		pr.b.Fatalf("%s: the supervisor was restarted during the window (pid %d, now %d)", pr.node.name, pr.pid, now)
	}
}

func (pr *idleProc) rssMiB() float64 { return pr.rssSum / float64(pr.rssSamples) / 1024 }

// cpuPct is CPU time over wall time, in percent of one core. Linux reports
// utime and stime in USER_HZ, which is 100 on every architecture Go
// supports.
func (pr *idleProc) cpuPct() float64 {
	return float64(pr.ticks) / 100 / pr.wall.Seconds() * 100
}

// cpuTicks is utime+stime of pid (all its threads, live and exited).
func cpuTicks(b testing.TB, pid int) int64 {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(s[strings.LastIndexByte(string(s), ')')+1:]))
	// After the command name: field 3 (state) is f[0], utime (14) f[11],
	// stime (15) f[12].
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return u + st
}

// vmRSS is VmRSS of pid in KiB.
func vmRSS(b testing.TB, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatalf("/proc/%d/status: VmRSS %q", pid, v)
			}
			return kib
		}
	}
	b.Fatalf("/proc/%d/status: no VmRSS", pid)
	return 0
}

// etcdCount is a difference of the etcd servers' gRPC counters.
type etcdCount struct {
	wall  time.Duration
	reqs  map[string]float64 // requests by grpc_method
	total float64            // requests
	rpcs  float64            // RPCs started (a stream counts once)
}

func (e etcdCount) rate() float64    { return e.total / e.wall.Seconds() }
func (e etcdCount) rpcRate() float64 { return e.rpcs / e.wall.Seconds() }

func (e etcdCount) byMethod() string {
	var parts []string
	for m, v := range e.reqs {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", m, v/e.wall.Seconds()))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// measureEtcd counts the requests the etcd servers received during window,
// calling tick once a second meanwhile (may be nil). The members run in
// this process and share one set of gRPC server metrics in the default
// Prometheus registry (the one each member serves at /metrics), so one
// read covers the whole cluster. The test's own client is idle meanwhile.
func measureEtcd(b testing.TB, window time.Duration, tick func()) etcdCount {
	c0 := grpcCounters(b)
	start := time.Now()
	for time.Since(start) < window {
		if tick != nil {
			tick()
		}
		time.Sleep(time.Second)
	}
	c1 := grpcCounters(b)
	e := etcdCount{wall: time.Since(start), reqs: map[string]float64{}}
	for m, v := range c1.reqs {
		e.reqs[m] = v - c0.reqs[m]
		e.total += v - c0.reqs[m]
	}
	e.rpcs = c1.rpcs - c0.rpcs
	return e
}

// grpcCounts are the etcd servers' gRPC counters at one instant.
type grpcCounts struct {
	reqs map[string]float64 // requests by method
	rpcs float64
}

// grpcCounters reads the requests received so far, by method: a unary call
// is one request (grpc_server_started_total); on a stream every message is
// one (grpc_server_msg_received_total), except that the middleware also
// counts the failed receive that ends each stream, so one per finished
// stream (grpc_server_handled_total) is taken off. clientv3's KeepAliveOnce
// opens a stream per renewal: one request, not two.
func grpcCounters(b testing.TB) grpcCounts {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatalf("gather etcd metrics: %v", err)
	}
	c := grpcCounts{reqs: map[string]float64{}}
	found := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			method, v := label(m, "grpc_method"), m.GetCounter().GetValue()
			stream := label(m, "grpc_type") != "unary"
			switch mf.GetName() {
			case "grpc_server_started_total":
				c.rpcs += v
				if !stream {
					c.reqs[method] += v
				}
			case "grpc_server_msg_received_total":
				if stream {
					c.reqs[method] += v
				}
			case "grpc_server_handled_total":
				if stream {
					c.reqs[method] -= v
				}
			default:
				continue
			}
			found++
		}
	}
	if found == 0 {
		b.Fatal("no grpc_server_* counters in the default registry: etcd's metrics moved")
	}
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// guardSocket asks n's guard socket guardSocketSamples times from the host
// (through /proc/PID/root: the same socket, the same server, no exec) and
// returns the round-trip times.
func guardSocket(b testing.TB, n *e2eNode, allowed bool) []time.Duration {
	path := filepath.Join(n.c.Root(), e2eGuardSock)
	lat := make([]time.Duration, 0, guardSocketSamples)
	for range guardSocketSamples {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		a, err := guard.Ask(ctx, path, "kube-scheduler.service")
		d := time.Since(t0)
		cancel()
		if err != nil || a.Allowed != allowed {
			b.Fatalf("%s: guard over %s: allowed %v (want %v), %v: %s", n.name, path, a.Allowed, allowed, err, a.Message)
		}
		lat = append(lat, d)
	}
	return lat
}

// guardExec runs kha-guard guardExecSamples times inside n, as systemd
// would (a fresh process each time, default configuration), timed by bash's
// $EPOCHREALTIME around each exec, and checks each exit code.
func guardExec(b testing.TB, n *e2eNode, wantCode int) []time.Duration {
	return timeExecs(b, n, e2eGuard+" kube-scheduler.service", wantCode)
}

// timeExecs runs command (a shell word list) guardExecSamples times inside
// n and returns how long each took.
func timeExecs(b testing.TB, n *e2eNode, command string, wantCode int) []time.Duration {
	script := fmt.Sprintf(`for i in $(seq %d); do
  s=$EPOCHREALTIME; %s >/dev/null 2>&1; rc=$?; e=$EPOCHREALTIME
  echo "$s $e $rc"
done`, guardExecSamples, command)
	out := n.run("bash", "-c", script)
	var lat []time.Duration
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			b.Fatalf("%s: %s: timing %q", n.name, command, line)
		}
		s, e := epochRealtime(b, f[0]), epochRealtime(b, f[1])
		if rc, err := strconv.Atoi(f[2]); err != nil || rc != wantCode {
			b.Fatalf("%s: %s exited %s, want %d", n.name, command, f[2], wantCode)
		}
		lat = append(lat, e.Sub(s))
	}
	if len(lat) != guardExecSamples {
		b.Fatalf("%s: %s: %d timings, want %d", n.name, command, len(lat), guardExecSamples)
	}
	return lat
}

// epochRealtime parses bash's $EPOCHREALTIME ("seconds.microseconds")
// exactly.
func epochRealtime(b testing.TB, v string) time.Time {
	sec, usec, ok := strings.Cut(v, ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	u, err2 := strconv.ParseInt(usec, 10, 64)
	if !ok || err1 != nil || err2 != nil || len(usec) != 6 {
		b.Fatalf("EPOCHREALTIME %q: want seconds.microseconds", v)
	}
	return time.Unix(s, u*1000)
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(i-1, 0)]
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func loadavg(b testing.TB) string {
	s, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(s))
	return strings.Join(f[:3], " ")
}
