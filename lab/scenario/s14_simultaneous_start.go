package scenario

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

func simultaneousStart(ctx context.Context, r *Run) error {
	// A start can fail before the supervisor runs at all (status 219/CGROUP:
	// this host's legacy cgroup hierarchy sometimes refuses the new unit's
	// cgroup right after the old one went); systemd restarts it a second
	// later, which is no longer "at the same instant". Such an attempt is
	// noted and the whole start is tried again.
	const attempts = 3
	for i := 1; i <= attempts; i++ {
		ok, err := r.startBoth(ctx, i == attempts)
		if err != nil || ok {
			return err
		}
		if _, _, err := r.Steady(ctx, r.steadyTimeout()); err != nil {
			return err
		}
		snap := r.Obs.Now()
		r.Leader, r.Standby, r.LeaderToken = snap.Leader, Other(snap.Leader), snap.Token
	}
	return nil
}

// startBoth stops both supervisors, then starts them at once. It returns
// false (and no error) when a start failed before the race could happen and
// last is not set.
func (r *Run) startBoth(ctx context.Context, last bool) (bool, error) {
	// Stop the standby first, then the leader (its units stop, the lease
	// is released), so that both start from nothing.
	for _, name := range []string{r.Standby, r.Leader} {
		if _, err := r.Nodes[name].Systemctl(ctx, "stop", lab.SupervisorUnit); err != nil {
			return false, err
		}
	}
	err := WaitFor(ctx, r.failoverTimeout(), "no leader, nothing running", func() (bool, string) {
		t := r.refreshNow()
		snap := r.Obs.Now()
		if snap.Leader != "" {
			return false, "election key still held by " + snap.Leader
		}
		for _, name := range lab.MasterNames {
			if r.AnyRunning(name, t) {
				return false, "units beating on " + name
			}
		}
		return true, ""
	})
	if err != nil {
		return false, err
	}
	// Nobody held anything at the start: no old leader to measure against.
	r.LeaderToken, r.Leader = 0, ""
	var wg sync.WaitGroup
	errs := make([]error, len(lab.MasterNames))
	fault, err := r.Fault("start both supervisors at once", func() error {
		for i, name := range lab.MasterNames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = r.Nodes[name].Systemctl(ctx, "start", lab.SupervisorUnit)
			}()
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		return false, err
	}
	failed := false
	for i, e := range errs {
		if e != nil {
			failed = true
			r.Notef("start of the supervisor on %s failed (%v); systemd restarts it", lab.MasterNames[i], firstLine(e.Error()))
		}
	}
	leader, err := r.Failover(ctx, fault, lab.MasterNames...)
	if err != nil {
		return false, err
	}
	if failed && !last {
		return false, nil
	}
	if err := Sleep(ctx, r.Profile.TTL); err != nil {
		return false, err
	}
	ch := r.Obs.LeaderChanges(fault, time.Now())
	if len(ch) != 1 {
		var seq []string
		for _, c := range ch {
			seq = append(seq, *c.Leader)
		}
		r.Failf("want exactly one election after the start, saw %d: %v", len(ch), seq)
	}
	other := Other(leader)
	_ = r.W.Refresh()
	for _, u := range Units() {
		if ins := r.W.InstancesBetween(other, u, fault, time.Now()); len(ins) > 0 {
			r.Failf("%s also ran %s", other, u)
		}
	}
	r.Notef("%s won", leader)
	return true, nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
