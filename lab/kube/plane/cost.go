package plane

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

// Cost is one supervisor's footprint over a window of a steady plane, its
// components running (in the fenced modes, every request of theirs through
// its gate): issue 12 wants the idle RSS under 40 MB with the gate on.
type Cost struct {
	Mode    string  `json:"mode"`
	Master  string  `json:"master"`
	Role    string  `json:"role"` // leader or standby
	RSSMean float64 `json:"rss_mean_mib"`
	RSSMax  float64 `json:"rss_max_mib"`
	// CPU is utime+stime of all its threads over the window's wall
	// time, in percent of one core.
	CPU     float64 `json:"cpu_percent"`
	Samples int     `json:"samples"`
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on every
// Linux architecture the package ships for).
const clockTicks = 100

// Cost switches the plane to mode, lets it settle, then samples both
// supervisors' VmRSS once a second over window, with their CPU time.
func (r *Runner) Cost(ctx context.Context, mode Mode, settle, window time.Duration) ([]Cost, error) {
	if mode.LeaderElect {
		return nil, fmt.Errorf("mode %s runs no supervisor", mode.Name)
	}
	if err := r.Use(ctx, mode); err != nil {
		return nil, err
	}
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	leader, _, err := r.Leaders(ctx, mode)
	if err != nil {
		return nil, err
	}
	nodes, err := r.P.Lab.Masters()
	if err != nil {
		return nil, err
	}
	type sampled struct {
		n          *master.Node
		pid        int
		sum, max   float64
		cpu0, cpu1 float64
		k          int
	}
	var ss []*sampled
	for _, m := range lab.MasterNames {
		pid, err := nodes[m].MainPID(ctx, lab.SupervisorUnit)
		if err != nil || pid == 0 {
			return nil, fmt.Errorf("%s: no %s process (%v)", m, lab.SupervisorUnit, err)
		}
		ss = append(ss, &sampled{n: nodes[m], pid: pid})
	}
	start := time.Now()
	for i := 0; ; i++ {
		for _, s := range ss {
			rss, cpu, err := procCost(ctx, s.n, s.pid)
			if err != nil {
				return nil, err
			}
			if i == 0 {
				s.cpu0 = cpu
			}
			s.cpu1 = cpu
			s.sum += rss
			s.max = max(s.max, rss)
			s.k++
		}
		if time.Since(start) >= window {
			break
		}
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	wall := time.Since(start).Seconds()
	var out []Cost
	for _, s := range ss {
		role := "standby"
		if s.n.Name == leader {
			role = "leader"
		}
		out = append(out, Cost{Mode: mode.Name, Master: s.n.Name, Role: role,
			RSSMean: s.sum / float64(s.k), RSSMax: s.max, CPU: 100 * (s.cpu1 - s.cpu0) / wall, Samples: s.k})
	}
	return out, nil
}

// procCost reads one process's VmRSS (MiB) and its utime+stime (seconds)
// inside the container.
func procCost(ctx context.Context, n *master.Node, pid int) (rssMiB, cpuSec float64, err error) {
	p := "/proc/" + strconv.Itoa(pid)
	out, err := n.Exec(ctx, "cat", p+"/status", p+"/stat")
	if err != nil {
		return 0, 0, err
	}
	rssMiB, cpuSec, err = parseProcCost(string(out))
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %s: %w", n.Name, p, err)
	}
	return rssMiB, cpuSec, nil
}

// parseProcCost reads VmRSS from /proc/PID/status and utime+stime from
// /proc/PID/stat, the two files one after the other in text.
func parseProcCost(text string) (rssMiB, cpuSec float64, err error) {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return 0, 0, fmt.Errorf("VmRSS %q: %w", v, err)
			}
			rssMiB = kb / 1024
		}
	}
	// stat's second field (comm) is in parentheses and may hold spaces:
	// count the fields after its closing one (utime, stime are 14 and 15).
	i := strings.LastIndex(text, ") ")
	if i < 0 || rssMiB == 0 {
		return 0, 0, fmt.Errorf("no VmRSS or no stat line")
	}
	f := strings.Fields(text[i+2:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("stat: %d fields after comm, want at least 13", len(f))
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("stat: utime %q stime %q", f[11], f[12])
	}
	return rssMiB, (ut + st) / clockTicks, nil
}

// rssGoalMiB is issue 12's bound on the supervisor's idle RSS with the gate
// on (40 MB; MiB here, the stricter reading).
const rssGoalMiB = 38.1

// WriteCosts prints the costs as a markdown table.
func WriteCosts(w io.Writer, cs []Cost) {
	fmt.Fprintln(w, "| mode | master | role | RSS mean MiB | RSS max MiB | CPU % of a core | samples | under 40 MB |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, c := range cs {
		ok := "yes"
		if c.RSSMax > rssGoalMiB {
			ok = "NO"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.1f | %.1f | %.2f | %d | %s |\n", c.Mode, c.Master, c.Role, c.RSSMean, c.RSSMax, c.CPU, c.Samples, ok)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
