package main

// The end-to-end harness shared by TestEndToEnd and BenchmarkIdle: the real
// kha-supervisor binary running as the packaged systemd service inside two
// systemd-nspawn containers, a real three-member etcd cluster on the host,
// and witness-like managed units guarded by the packaged drop-in.
//
// Networking: each container has its own network namespace with only
// loopback. The etcd members listen on the host's loopback, so each
// container gets one TCP proxy per member whose listening socket is created
// inside the container's namespace (a socket keeps the namespace it was
// created in) and which dials the member from the host. No route or address
// is added anywhere.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/internal/netns"
	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/internal/tcpproxy"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

// e2ePrefix starts the machine names of this harness's containers.
const e2ePrefix = "kt-e2e-"

// Paths inside each container. The binary stays in the /lab bind (it is
// not copied into the container); the configuration sits where the guard
// finds it by default, because the packaged drop-in runs `kha-guard %n` with no
// -c, as in production.
const (
	e2eBinary     = "/lab/bin/kha-supervisor"
	e2eGuard      = "/lab/bin/kha-guard" // the drop-ins' ExecStartPre=, as the packages install it
	e2eConfig     = "/etc/kha-supervisor/config.toml"
	e2eUnitDir    = "/etc/systemd/system"
	e2eSupervisor = dropin.SupervisorUnit
	e2eGuardSock  = "/run/kha-supervisor/guard.sock"
)

// e2eUnits are the managed units, in start order; the real names, so that
// the configuration's defaults and the drop-in see what production sees.
var e2eUnits = []string{"kube-controller-manager.service", "kube-scheduler.service"}

// e2eProfile is the supervisor timing of one run.
type e2eProfile struct {
	Name                       string
	TTL, Renew, Request, Slack time.Duration
	Stop, KillGrace, Poll      time.Duration
	WatchdogSec                time.Duration // 0: keep the packaged unit's value
	LogLevel                   string
	// ShortWindow sets lease.accept_short_window: a window under the
	// stock etcd election gap, fine against etcdtest's fast etcd timing.
	ShortWindow bool
	// Binaries: each managed unit runs its own executable,
	// /usr/local/bin/<unit name without .service> (a copy of sleep), instead
	// of /bin/sleep, so that the stray scan (and the exec watch) look for it.
	Binaries bool
	// NoExecWatch: units.exec_watch = false (the /proc poll alone).
	NoExecWatch bool
	// SupervisorDropin: more [Service] lines for the supervisor's unit, as
	// an operator's own drop-in would add them.
	SupervisorDropin string
}

// e2eFast is the brief's fast profile: TTL 4 s, renew 0.5 s, S_max 1.5 s.
// The packaged unit's WatchdogSec=2s is sized for TTL 10 s; its own comment
// asks for 1 s with this profile.
var e2eFast = e2eProfile{
	Name: "fast", TTL: 4 * time.Second, Renew: 500 * time.Millisecond, Request: 500 * time.Millisecond,
	Slack: 500 * time.Millisecond, Stop: time.Second, KillGrace: 500 * time.Millisecond,
	Poll: 250 * time.Millisecond, WatchdogSec: time.Second,
	LogLevel: "info", ShortWindow: true,
}

// e2eDefault is the shipped defaults (config.example.toml), for measuring
// what an idle production supervisor costs.
var e2eDefault = e2eProfile{
	Name: "default", TTL: 10 * time.Second, Renew: time.Second, Request: time.Second,
	Slack: 500 * time.Millisecond, Stop: 2 * time.Second, KillGrace: time.Second,
	Poll: time.Second, LogLevel: "info",
}

// config renders node's configuration file.
func (p e2eProfile) config(node string, endpoints []string) []byte {
	q := func(ss []string) string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	return fmt.Appendf(nil, `# Written by the kha-supervisor end-to-end test (profile %s).
node = %q
cluster = "e2e"

[etcd]
endpoints = %s
request_timeout = %q

[lease]
ttl = %q
renew_interval = %q
slack = %q
accept_short_window = %t

[units]
managed = %s
stop_timeout = %q
kill_grace = %q
poll_interval = %q

exec_watch = %v

[guard]
socket = %q

[log]
level = %q
`, p.Name, node, q(endpoints), p.Request, p.TTL, p.Renew, p.Slack, p.ShortWindow, q(e2eUnits), p.Stop, p.KillGrace, p.Poll,
		!p.NoExecWatch, e2eGuardSock, p.LogLevel)
}

// supervisorDropin points the packaged unit at the binary in /lab and, for
// short TTLs, shortens its watchdog.
func (p e2eProfile) supervisorDropin() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by the kha-supervisor end-to-end test.\n[Service]\nExecStart=\nExecStart=%s run -c %s\n", e2eBinary, e2eConfig)
	if p.WatchdogSec > 0 {
		fmt.Fprintf(&b, "WatchdogSec=%s\n", dropin.Seconds(p.WatchdogSec))
	}
	b.WriteString(p.SupervisorDropin)
	return b.Bytes()
}

// managedUnit is a stand-in for a Kubernetes component: a process that
// does nothing until it is stopped. Restart=on-failure like the real units,
// and never enabled.
func managedUnit(name string) []byte { return managedUnitExec(name, "/bin/sleep") }

// managedUnitExec is managedUnit running exe (a copy of sleep) instead.
func managedUnitExec(name, exe string) []byte {
	return fmt.Appendf(nil, `# Written by the kha-supervisor end-to-end test: a stand-in for %s.
[Unit]
Description=e2e stand-in for %s

[Service]
ExecStart=%s infinity
Restart=on-failure
RestartSec=200ms
`, name, name, exe)
}

// componentBinary is where a profile with Binaries puts unit's executable.
func componentBinary(unit string) string {
	return "/usr/local/bin/" + strings.TrimSuffix(unit, ".service")
}

// e2eCluster is the running setup.
type e2eCluster struct {
	t       testing.TB
	profile e2eProfile
	etcd    *etcdtest.Cluster
	nodes   []*e2eNode
}

// e2eNode is one master: a container running kha-supervisor.service.
type e2eNode struct {
	t       testing.TB
	name    string // node name in the configuration (m1, m2)
	c       *nspawn.Container
	lab     string          // host directory bound at /lab
	poll    time.Duration   // units.poll_interval
	proxies *tcpproxy.Group // etcd, as seen from inside the container
}

// newE2ECluster builds the binary, starts etcd and the containers, installs
// everything and starts both supervisors. It does not wait for a leader.
func newE2ECluster(t testing.TB, p e2eProfile) *e2eCluster {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "go", "systemd-nspawn", "nsenter", "ip")
	if _, err := nspawn.CleanupStale(e2ePrefix); err != nil {
		t.Fatalf("cleanup of earlier runs: %v", err)
	}
	start := time.Now()
	base := t.TempDir()
	names := []string{"m1", "m2"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(base, n, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// The build, the etcd cluster and the boots are independent and each
	// takes seconds on a busy machine: overlap them.
	var wg sync.WaitGroup
	var buildErr error
	bin := filepath.Join(base, "kha-supervisor")
	guardBin := filepath.Join(base, "kha-guard")
	wg.Go(func() {
		if pre := os.Getenv("KHA_E2E_BINARY"); pre != "" {
			// Binaries built elsewhere (e.g. from one commit, for
			// measurements that must not follow a tree others edit):
			// kha-guard beside kha-supervisor.
			buildErr = errors.Join(copyE2EBinary(pre, bin), copyE2EBinary(filepath.Join(filepath.Dir(pre), "kha-guard"), guardBin))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for _, b := range []struct{ pkg, out string }{{".", bin}, {"../kha-guard", guardBin}} {
			out, err := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %w: %s", b.pkg, err, out)
				return
			}
		}
	})
	containers := make([]*nspawn.Container, len(names))
	bootErrs := make([]error, len(names))
	tag := strconv.Itoa(os.Getpid())
	for i, n := range names {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			containers[i], bootErrs[i] = nspawn.Boot(ctx, nspawn.Options{
				Name: e2ePrefix + tag + "-" + n,
				Lab:  filepath.Join(base, n),
			})
		})
	}
	// NewCluster may call t.Fatal, so it runs on the test goroutine; the
	// containers' cleanup must still happen if it does.
	waited := false
	wait := func() {
		if !waited {
			waited = true
			wg.Wait()
		}
	}
	t.Cleanup(func() {
		wait()
		shutdownAll(t, containers)
	})
	ec := etcdtest.NewCluster(t, etcdtest.Options{Members: 3})
	wait()
	if err := errors.Join(append([]error{buildErr}, bootErrs...)...); err != nil {
		t.Fatalf("set-up: %v", err)
	}
	t.Logf("binary built, etcd up, containers booted in %s", time.Since(start).Round(time.Millisecond))

	c := &e2eCluster{t: t, profile: p, etcd: ec}
	targets := make([]string, ec.Size())
	for i := range targets {
		targets[i] = strings.TrimPrefix(ec.Member(i).Endpoint(), "http://")
	}
	for i, name := range names {
		n := &e2eNode{t: t, name: name, c: containers[i], lab: filepath.Join(base, name), poll: p.Poll}
		for _, f := range []string{bin, guardBin} {
			if err := os.Link(f, filepath.Join(n.lab, "bin", filepath.Base(f))); err != nil {
				t.Fatal(err)
			}
		}
		err := netns.Do(n.c.NetNS(), func() error {
			var err error
			n.proxies, err = tcpproxy.NewGroup(targets...)
			return err
		})
		if err != nil {
			t.Fatalf("etcd proxies into %s: %v", n.c.Name(), err)
		}
		// Closed after the containers are shut down (cleanups run last
		// first), so the supervisors can still release their lease.
		t.Cleanup(func() { _ = n.proxies.Close() })
		c.nodes = append(c.nodes, n)
	}
	// Registered last, so it runs before anything is torn down.
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("KHA_E2E_JOURNALS") != "" {
			c.dumpJournals()
		}
	})
	for _, n := range c.nodes {
		n.install(p)
	}
	for _, n := range c.nodes {
		n.systemctl("start", e2eSupervisor)
	}
	t.Logf("set-up done in %s (profile %s)", time.Since(start).Round(time.Millisecond), p.Name)
	return c
}

func copyE2EBinary(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("KHA_E2E_BINARY: %w", err)
	}
	return os.WriteFile(dst, b, 0o755)
}

func shutdownAll(t testing.TB, cs []*nspawn.Container) {
	var wg sync.WaitGroup
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := c.Shutdown(ctx); err != nil {
				t.Errorf("shut down %s: %v", c.Name(), err)
			}
		})
	}
	wg.Wait()
}

// install writes the configuration, the supervisor's unit (the packaged
// file, unchanged, plus a drop-in), the managed units and their packaged
// drop-ins, and reloads systemd.
func (n *e2eNode) install(p e2eProfile) {
	n.t.Helper()
	eps := make([]string, 0, 3)
	for _, a := range n.proxies.Addrs() {
		eps = append(eps, "http://"+a)
	}
	unit, err := os.ReadFile("../../packaging/systemd/" + e2eSupervisor)
	if err != nil {
		n.t.Fatalf("the packaged unit file: %v", err)
	}
	files := map[string][]byte{
		e2eConfig:                        p.config(n.name, eps),
		e2eUnitDir + "/" + e2eSupervisor: unit,
		e2eUnitDir + "/" + e2eSupervisor + ".d/90-e2e.conf": p.supervisorDropin(),
	}
	for _, u := range e2eUnits {
		files[e2eUnitDir+"/"+u] = managedUnit(u)
		files[dropin.Path(e2eUnitDir, u)] = n.renderDropin(u, p)
		if p.Binaries {
			files[e2eUnitDir+"/"+u] = managedUnitExec(u, componentBinary(u))
			sleep, err := os.ReadFile(n.c.Root() + "/bin/sleep")
			if err != nil {
				n.t.Fatal(err)
			}
			files[componentBinary(u)] = sleep
		}
	}
	for path, body := range files {
		mode := os.FileMode(0o644)
		switch {
		case path == e2eConfig:
			mode = 0o600
		case strings.HasPrefix(path, "/usr/local/bin/"):
			mode = 0o755
		}
		if err := n.c.WriteFile(path, body, mode); err != nil {
			n.t.Fatal(err)
		}
	}
	n.run(e2eBinary, "check-config", "-c", e2eConfig)
	n.systemctl("daemon-reload")
}

func (n *e2eNode) renderDropin(unit string, p e2eProfile) []byte {
	b, err := dropin.Render(dropin.Params{Unit: unit, Guard: e2eGuard, StopTimeout: p.Stop})
	if err != nil {
		n.t.Fatalf("render drop-in: %v", err)
	}
	return b
}

// exec runs argv in the container and returns its output and exit code
// (-1 if it could not run at all).
func (n *e2eNode) exec(argv ...string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := n.c.Command(ctx, argv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0, nil
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode(), nil
	default:
		return out.String(), -1, fmt.Errorf("%s: %s: %w", n.name, strings.Join(argv, " "), err)
	}
}

// run is exec that must exit 0.
func (n *e2eNode) run(argv ...string) string {
	n.t.Helper()
	out, code, err := n.exec(argv...)
	if err != nil || code != 0 {
		n.t.Fatalf("%s: %s: exit %d, %v: %s", n.name, strings.Join(argv, " "), code, err, out)
	}
	return out
}

func (n *e2eNode) systemctl(args ...string) string {
	n.t.Helper()
	return n.run(append([]string{"systemctl"}, args...)...)
}

// show reads one property of unit.
func (n *e2eNode) show(unit, prop string) string {
	n.t.Helper()
	return strings.TrimSpace(n.systemctl("show", "-P", prop, unit))
}

// systemd's catalogue ids of the messages PID 1 logs when a unit's start
// job completes (the unit entered active) and when its stop job completes
// (it entered inactive or failed).
const (
	msgUnitStarted = "39f53479d3a045ac8e11786248231fbf"
	msgUnitStopped = "9d1aaa27d60140bd96365438aad20286"
)

// unitEvent is one start or stop of a unit, as its journal records it.
type unitEvent struct {
	At      time.Time
	Started bool // false: stopped
}

// unitEvents reads unit's starts and stops from the journal inside the
// node, timed by systemd's own realtime clock (microseconds; the host and
// both containers share the kernel's clock). The journal, not the unit's
// ActiveEnterTimestamp / InactiveEnterTimestamp properties: systemd unloads
// an inactive unit nothing references, and the properties go with it.
func (n *e2eNode) unitEvents(unit string) []unitEvent {
	n.t.Helper()
	out := n.run("journalctl", "--no-pager", "-o", "json", "-u", unit,
		"--output-fields=MESSAGE_ID,_SOURCE_REALTIME_TIMESTAMP")
	var evs []unitEvent
	for line := range strings.SplitSeq(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var e struct {
			ID     string `json:"MESSAGE_ID"`
			Source string `json:"_SOURCE_REALTIME_TIMESTAMP"`
			Recv   string `json:"__REALTIME_TIMESTAMP"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			n.t.Fatalf("%s: journal of %s: %v: %s", n.name, unit, err, line)
		}
		if e.ID != msgUnitStarted && e.ID != msgUnitStopped {
			continue
		}
		ts := e.Source // when PID 1 logged it, not when journald got it
		if ts == "" {
			ts = e.Recv
		}
		us, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			n.t.Fatalf("%s: journal of %s: timestamp %q: %v", n.name, unit, ts, err)
		}
		evs = append(evs, unitEvent{At: time.UnixMicro(us), Started: e.ID == msgUnitStarted})
	}
	return evs
}

// lastEvent waits for unit's last start (or stop) at or after since to
// reach the journal and returns its time.
func (n *e2eNode) lastEvent(unit string, started bool, since time.Time) time.Time {
	n.t.Helper()
	what := "stop"
	if started {
		what = "start"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var last time.Time
		for _, e := range n.unitEvents(unit) {
			if e.Started == started && !e.At.Before(since) {
				last = e.At
			}
		}
		if !last.IsZero() {
			return last
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: no %s of %s in the journal since %s", n.name, what, unit, since.Format(time.StampMicro))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startedSince reports whether unit was started at or after since.
func (n *e2eNode) startedSince(unit string, since time.Time) bool {
	n.t.Helper()
	for _, e := range n.unitEvents(unit) {
		if e.Started && !e.At.Before(since) {
			return true
		}
	}
	return false
}

// activeUnits returns the managed units whose ActiveState is active.
func (n *e2eNode) activeUnits() []string {
	n.t.Helper()
	var out []string
	for _, u := range e2eUnits {
		if n.show(u, "ActiveState") == "active" {
			out = append(out, u)
		}
	}
	return out
}

// status runs `kha-supervisor status --json` inside the node.
func (n *e2eNode) status() group.ClusterStatus {
	n.t.Helper()
	// 8, 9 and 10 (no active member, this node unhealthy, no standby)
	// still print the JSON.
	out, code, err := n.exec(e2eBinary, "status", "--json", "-c", e2eConfig)
	if err != nil || (code != exitOK && code != exitNoActive && code != exitLocalBad && code != exitNoStandby) {
		n.t.Fatalf("%s: status --json: exit %d, %v: %s", n.name, code, err, out)
	}
	var cs group.ClusterStatus
	if err := json.Unmarshal([]byte(out), &cs); err != nil {
		n.t.Fatalf("%s: status --json: %v: %s", n.name, err, out)
	}
	return cs
}

// member returns name's record in cs.
func member(cs group.ClusterStatus, name string) (group.Record, bool) {
	for _, m := range cs.Members {
		if m.Node == name {
			return m, true
		}
	}
	return group.Record{}, false
}

// supervisorPID is the host PID of the running kha-supervisor process.
func (n *e2eNode) supervisorPID() int {
	n.t.Helper()
	return n.hostPID(n.show(e2eSupervisor, "MainPID"))
}

// hostPID maps a PID inside the container (as a string, e.g. MainPID) to
// the host's PID: the process whose NSpid ends with it, in the container's
// PID namespace.
func (n *e2eNode) hostPID(inner string) int {
	n.t.Helper()
	want, err := strconv.Atoi(inner)
	if err != nil || want <= 0 {
		n.t.Fatalf("%s: no such process inside: %q", n.name, inner)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", n.c.Leader()))
	if err != nil {
		n.t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || l != ns {
			continue
		}
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
				fs := strings.Fields(v)
				if len(fs) > 0 && fs[len(fs)-1] == inner {
					f.Close()
					return pid
				}
			}
		}
		f.Close()
	}
	n.t.Fatalf("%s: no host PID for PID %d inside", n.name, want)
	return 0
}

// journal returns unit's journal inside the node.
func (n *e2eNode) journal(unit string) string {
	out, _, _ := n.exec("journalctl", "--no-pager", "-o", "short-precise", "-u", unit)
	return out
}

func (c *e2eCluster) dumpJournals() {
	for _, n := range c.nodes {
		for _, u := range append([]string{e2eSupervisor}, e2eUnits...) {
			c.t.Logf("---- %s: journal of %s ----\n%s", n.name, u, n.journal(u))
		}
	}
}

// waitStable waits until exactly one node runs every managed unit, the
// other runs none, and `status --json` (read on the standby) names that
// node as leader with both members in their steady states. It returns the
// leader and the standby.
func (c *e2eCluster) waitStable(timeout time.Duration) (leader, standby *e2eNode, cs group.ClusterStatus) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var all, none []*e2eNode
		for _, n := range c.nodes {
			switch len(n.activeUnits()) {
			case len(e2eUnits):
				all = append(all, n)
			case 0:
				none = append(none, n)
			}
		}
		if len(all) == 1 && len(none) == len(c.nodes)-1 {
			leader, standby = all[0], none[0]
			cs = standby.status()
			lr, ok1 := member(cs, leader.name)
			sr, ok2 := member(cs, standby.name)
			if cs.Leader == leader.name && cs.Token > 0 && ok1 && ok2 &&
				lr.State == group.Active && lr.UnitsRunning && lr.Token == cs.Token &&
				sr.State == group.Standby && !sr.UnitsRunning {
				return leader, standby, cs
			}
			last = fmt.Sprintf("units run on %s only, but status says leader %q token %d, members %+v", leader.name, cs.Leader, cs.Token, cs.Members)
		} else {
			last = fmt.Sprintf("%d node(s) run every unit, %d run none", len(all), len(none))
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("no stable leader within %s: %s", timeout, last)
	return nil, nil, cs
}

// other returns the node that is not n.
func (c *e2eCluster) other(n *e2eNode) *e2eNode {
	i := slices.Index(c.nodes, n)
	return c.nodes[1-i]
}
