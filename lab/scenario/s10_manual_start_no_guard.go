package scenario

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

func manualStartNoGuard(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Standby]
	if err := r.removeGuard(ctx, n); err != nil {
		return err
	}
	// Reloading systemd stalls its bus for seconds on this machine; let the
	// standby's supervisor get past that before the operator's start, so
	// the measurement is about the start and not about the reload.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	unit := scheduler + ".service"
	fault, err := r.Fault("systemctl start "+scheduler+" on the standby "+r.Standby+" without the guard", func() error {
		_, err := n.Systemctl(ctx, "start", unit)
		return err
	})
	if err != nil {
		return err
	}
	// Whatever overlap the hand-started instance has with the leader's is
	// the operator's doing (the guard was removed); it is reported apart.
	r.excuse = func(o witness.Overlap) bool {
		rogue := func(i witness.Instance) bool {
			return i.Node == r.Standby && i.Unit == scheduler && !i.First.Before(fault)
		}
		return rogue(o.A) || rogue(o.B)
	}
	err = WaitFor(ctx, 10*r.Profile.Poll+10*time.Second, "standby supervisor stops the unit", func() (bool, string) {
		st, err := n.ActiveState(ctx, unit)
		return err == nil && (st == "inactive" || st == "failed"), "unit " + st
	})
	if err != nil {
		return err
	}
	if err := r.rogueActive(ctx, n, unit); err != nil {
		return err
	}
	_ = r.W.Refresh()
	if first, ok := r.W.FirstStart(r.Standby, scheduler, fault); ok {
		last, _ := r.W.LastBeat(r.Standby, scheduler, time.Now())
		r.Metric("rogue_beating", last.Sub(first)+witness.Grace)
		r.Metric(report.MStopped, last.Sub(fault))
		r.Mark(first, r.Standby, "hand-started unit beats on "+r.Standby)
		r.Mark(last, r.Standby, "its last heartbeat")
	} else {
		r.Notef("the hand-started unit was stopped before its first heartbeat")
	}
	if j := r.JournalSince(ctx, r.Standby, lab.SupervisorUnit, fault); strings.Contains(j, "running on standby; stopping it") {
		r.Notef("the standby's supervisor logged: managed unit running on standby; stopping it")
	} else {
		r.Failf("the standby's supervisor did not log stopping the unit")
	}
	if ch := r.Obs.LeaderChanges(fault, time.Now()); len(ch) > 0 {
		r.Failf("leadership changed")
	}
	return nil
}

// removeGuard moves the guard drop-ins of n aside until the scenario ends.
func (r *Run) removeGuard(ctx context.Context, n *master.Node) error {
	paths, err := guardDropins(n)
	if err != nil {
		return err
	}
	// Registered first, so it runs last (undo steps run last-in,
	// first-out): after every drop-in is back.
	r.Undo(func(ctx context.Context) error {
		_, err := n.Systemctl(ctx, "daemon-reload")
		return err
	})
	for _, p := range paths {
		host := filepath.Join(n.Root(), p)
		if err := os.Rename(host, host+".lab-removed"); err != nil {
			return err
		}
		r.Undo(func(ctx context.Context) error {
			return os.Rename(host+".lab-removed", host)
		})
	}
	if _, err := n.Systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	return nil
}

// rogueActive records how long the hand-started unit was active, by
// systemd's own clock (monotonic, microseconds).
func (r *Run) rogueActive(ctx context.Context, n *master.Node, unit string) error {
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "-p", "InactiveEnterTimestampMonotonic", unit)
	if err != nil {
		return err
	}
	props := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			props[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if a, i := props["ActiveEnterTimestampMonotonic"], props["InactiveEnterTimestampMonotonic"]; a > 0 && i > a {
		r.Metric("rogue_active", time.Duration(i-a)*time.Microsecond)
	}
	return nil
}
