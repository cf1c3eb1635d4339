package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

type notes struct {
	mu  sync.Mutex
	all []string
}

func (n *notes) notify(s string) { n.mu.Lock(); n.all = append(n.all, s); n.mu.Unlock() }

func (n *notes) with(prefix string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, s := range n.all {
		if strings.HasPrefix(s, prefix) {
			c++
		}
	}
	return c
}

// A node fenced in a partition exits and systemd starts it again; inside
// the partition that start-up cannot reach etcd. A restarted process keeps
// dialing and is in the group within a connection attempt of the heal
// (real etcd behind a silent, then healed link); a first start gives up at
// once, as it always did, so that `systemctl start` fails with the reason.
// Both leave the managed units stopped, including one started meanwhile.
func TestRestartedDaemonRejoinsAtTheHeal(t *testing.T) {
	c := etcdtest.NewCluster(t, etcdtest.Options{Members: 1})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, rejoin := range []bool{true, false} {
		eps, link := c.ProxiedEndpoints(t)
		link.Blackhole(true)
		cfg := config.Default()
		cfg.Node = "m1"
		cfg.Etcd.Endpoints = eps
		cfg.Etcd.DialTimeout, cfg.Etcd.RequestTimeout = 500*time.Millisecond, 250*time.Millisecond
		cfg.Units.Managed = []string{"kube-scheduler.service"}
		units := fencing.NewMemory()
		if err := units.Start(t.Context(), "kube-scheduler.service"); err != nil {
			t.Fatal(err)
		}
		var n notes
		healed := make(chan time.Time, 1)
		go func() {
			// A restarted process tells systemd after each failed attempt
			// (and the stop that follows it): the hand start comes after
			// the first, the heal after the next, so that a failed attempt
			// surely lies between them however the machine's load
			// stretches the attempts. A first start makes one attempt.
			extends := func(k int) {
				for end := time.Now().Add(15 * time.Second); n.with("EXTEND_TIMEOUT_USEC=") < k && time.Now().Before(end); {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if rejoin {
				extends(1)
			} else {
				time.Sleep(1500 * time.Millisecond)
			}
			// Started by hand while etcd is out of reach: stopped again.
			_ = units.Start(context.Background(), "kube-scheduler.service")
			if rejoin {
				extends(2)
			} else {
				time.Sleep(500 * time.Millisecond)
			}
			healed <- time.Now()
			link.Blackhole(false)
		}()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		cli, code := dialAtStart(ctx, cfg, units, log, n.notify, rejoin)
		cancel()
		done := time.Now()
		heal := <-healed
		switch {
		case rejoin && (cli == nil || code != ExitOK):
			t.Fatalf("restarted process: code %d, want a client once the link healed", code)
		case rejoin && done.Before(heal):
			t.Fatalf("restarted process: reached etcd before the heal (%v)", heal.Sub(done))
		case rejoin && n.with("EXTEND_TIMEOUT_USEC=") == 0:
			t.Errorf("restarted process: systemd was not asked to extend the start timeout: %q", n.all)
		case !rejoin && (cli != nil || code != ExitFailure):
			t.Fatalf("first start: code %d, client %v; want exit %d after one attempt", code, cli != nil, ExitFailure)
		case !rejoin && !done.Before(heal):
			t.Fatalf("first start: dialed on past the heal")
		}
		if cli != nil {
			_ = cli.Close()
		}
		if rejoin && units.Running("kube-scheduler.service") {
			t.Errorf("the unit started while etcd was out of reach still runs")
		}
		if !rejoin && n.with("EXTEND_TIMEOUT_USEC=") != 0 {
			t.Errorf("first start asked systemd to extend its start timeout: %q", n.all)
		}
		t.Logf("rejoin=%v: code %d, returned %v after the heal", rejoin, code, done.Sub(heal).Round(time.Millisecond))
	}
}

// A restart is told from a first start by the predecessor's run state.
func TestRejoiningNeedsAPredecessorsRunState(t *testing.T) {
	dir := t.TempDir()
	if rejoining(dir) {
		t.Fatal("an empty run directory counts as a restart")
	}
	if err := (runstate.Store{Dir: dir}).Save(runstate.State{Node: "m1", Cluster: "lab", Incarnation: "x"}); err != nil {
		t.Fatal(err)
	}
	if !rejoining(dir) {
		t.Fatal("a predecessor's run state does not count as a restart")
	}
}

// The extension covers one more attempt and the start-up budget after it.
func TestExtendStartCoversTheRestOfStartUp(t *testing.T) {
	cfg := config.Default()
	got := extendStart(cfg)
	if !strings.HasPrefix(got, "EXTEND_TIMEOUT_USEC=") {
		t.Fatalf("%q", got)
	}
	var usec int64
	if _, err := fmt.Sscan(strings.TrimPrefix(got, "EXTEND_TIMEOUT_USEC="), &usec); err != nil {
		t.Fatal(err)
	}
	if d := time.Duration(usec) * time.Microsecond; d < 40*time.Second+cfg.Etcd.DialTimeout {
		t.Errorf("extension %v is shorter than the packaged start timeout plus a dial", d)
	}
}
