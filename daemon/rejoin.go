package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// rejoinFor is how long a process that systemd started again keeps dialing
// etcd at start-up before it gives up (exit 1, and systemd starts it again).
// Long enough that a partition of a minute costs one journal ERROR rather
// than one per restart; short enough that `systemctl status` does not show a
// start that never ends.
const rejoinFor = time.Minute

// rejoinPause separates two dial attempts. An attempt into a silent
// partition takes dial_timeout + request_timeout by itself; a refused
// connection fails at once, and a few attempts a second are plenty then.
const rejoinPause = 250 * time.Millisecond

// rejoining reports whether this process is a restart of an earlier one in
// this boot: its predecessor's run state is there (RuntimeDirectoryPreserve=
// keeps it across a restart after a fence, a crash or a watchdog kill;
// systemd removes it when the unit is stopped).
func rejoining(dir string) bool {
	_, ok, err := runstate.Store{Dir: dir}.Load()
	return ok && err == nil
}

// dialAtStart reaches etcd. When no endpoint answers, the managed units are
// stopped (a node that cannot prove a lease must not run them, whatever ran
// before) and a first start exits at once (exit 1), so that `systemctl
// start` with etcd out of reach fails with the reason in the journal. A
// restarted process (rejoin) dials again instead, for up to rejoinFor,
// telling systemd to extend its start timeout: a node fenced in a partition
// waits for the heal in place, with one ERROR, instead of a restart every
// RestartSec plus a failed dial (3.75 s in the fast profile) with one each,
// and rejoins with the first connection after the heal, which the attempt
// under way finds by itself: gRPC redials every 100 ms, and behind a dead
// switch etcdconn's dialer sends a fresh SYN every 200 ms (lab scenario
// 70, behind the lab's blackhole routes: etcd answered 0.19-0.27 s after
// the heal). Every failed attempt stops any managed unit found running
// again, as each restart did. Endpoints of two etcd clusters are a
// configuration error and exit 2 at once.
func dialAtStart(ctx context.Context, cfg config.Config, units fencing.Units, log *slog.Logger, notify func(string), rejoin bool) (*clientv3.Client, int) {
	start, extend := time.Now(), extendStart(cfg)
	for attempt := 1; ; attempt++ {
		dctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout+cfg.Etcd.RequestTimeout)
		cli, err := etcdconn.Dial(dctx, cfg.Etcd)
		cancel()
		switch {
		case err == nil:
			if attempt > 1 {
				log.Info("etcd answers again; starting", "out_of_reach", time.Since(start).Round(time.Millisecond), "attempts", attempt)
			}
			return cli, ExitOK
		case errors.Is(err, etcdconn.ErrForeignCluster):
			// A configuration error, but the units still stop: nothing
			// can be proven through endpoints of two clusters.
			log.Error("etcd.endpoints name members of more than one etcd cluster; stopping managed units and exiting", "err", err, "config", cfg.Path)
			stopManaged(cfg, units, log)
			return nil, ExitConfig
		case ctx.Err() != nil && attempt > 1:
			log.Info("stopped while etcd was out of reach; stopping managed units")
			stopManaged(cfg, units, log)
			return nil, ExitOK
		case !rejoin || time.Since(start) >= rejoinFor:
			log.Error("cannot reach etcd; stopping managed units and exiting", "err", err)
			stopManaged(cfg, units, log)
			return nil, ExitFailure
		}
		if attempt == 1 {
			log.Error("cannot reach etcd; stopping managed units and dialing again until it answers", "err", err, "for", rejoinFor)
			stopManaged(cfg, units, log)
			notify(fmt.Sprintf("STATUS=etcd out of reach since %s; dialing again", start.Format(time.TimeOnly)))
		} else {
			stopRunning(ctx, cfg, units, log)
		}
		notify(extend)
		select {
		case <-ctx.Done():
		case <-time.After(rejoinPause):
		}
	}
}

// stopRunning stops the managed units only if one runs: between two dial
// attempts that is what a restart's start-up reconcile did.
func stopRunning(ctx context.Context, cfg config.Config, units fencing.Units, log *slog.Logger) {
	rctx, cancel := context.WithTimeout(ctx, cfg.Etcd.DialTimeout)
	states, err := units.States(rctx, cfg.Units.Managed)
	cancel()
	if err == nil {
		running := false
		for _, st := range states {
			running = running || st.Running()
		}
		if !running {
			return
		}
		log.Warn("a managed unit was started while etcd is out of reach; stopping it", "units", states)
	}
	stopManaged(cfg, units, log)
}

// extendStart is the sd_notify message that gives the start-up, from now,
// one more dial attempt and the pause before it, plus the whole budget the
// installed TimeoutStartSec= was sized for (dropin.StartTimeout): what
// follows a successful dial (registration, the wait for a predecessor's
// record) keeps its full time however long etcd was out of reach. systemd
// only ever lengthens a timeout with it.
func extendStart(cfg config.Config) string {
	rest, err := dropin.StartTimeout(dropin.StartBudgetOf(cfg))
	if err != nil {
		rest = dropin.DefaultStartTimeout
	}
	d := cfg.Etcd.DialTimeout + cfg.Etcd.RequestTimeout + rejoinPause + rest
	return fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", d.Microseconds())
}
