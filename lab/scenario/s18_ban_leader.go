package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

func banScenario(ctx context.Context, r *Run) error {
	banned, other := r.Leader, r.Standby
	r.Undo(func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := group.ClearBan(cctx, r.Cli, r.Keys, banned)
		return err
	})
	fault, err := r.Fault("`kha-supervisor ban "+banned+"` on "+banned, func() error {
		if out, code := r.kha(ctx, banned, "ban", banned, "--reason", "lab scenario 18"); code != 0 {
			return fmt.Errorf("ban: exit %d: %s", code, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := r.Failover(ctx, fault, other); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	err = WaitFor(ctx, r.steadyTimeout(), "banned node standby", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[banned]
		return ok && rec.State == group.Standby, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	if out, _ := r.kha(ctx, other, "status"); !strings.Contains(out, "BANNED") {
		r.Failf("status does not show %s BANNED: %q", banned, out)
	}
	r.Leader, r.Standby, r.LeaderToken = other, banned, r.Obs.Now().Token
	from := time.Now()
	out, code := r.kha(ctx, other, "handoff", "--to", banned, "--wait", "--timeout", "10s")
	if code == 0 || !strings.Contains(out, "banned") {
		r.Failf("handoff --to the banned %s: exit %d, want a refusal naming the ban: %q", banned, code, out)
	} else {
		n := fmt.Sprintf("handoff --to %s refused (exit %d): %s", banned, code, out)
		r.Notef("%s", n)
		r.Res.Figures.BanRefusals = append(r.Res.Figures.BanRefusals, n)
	}
	out, code = r.kha(ctx, other, "handoff", "--wait", "--timeout", "10s")
	if code == 0 {
		r.Failf("handoff to any member with only a banned standby: exit 0: %q", out)
	} else {
		r.Notef("handoff to any member refused (exit %d): %s", code, out)
	}
	// A lease's worth of time: the banned node never campaigns.
	if err := Sleep(ctx, r.Profile.TTL); err != nil {
		return err
	}
	r.NoChange(from, time.Now())
	if out, code := r.kha(ctx, other, "unban", banned); code != 0 {
		return fmt.Errorf("unban: exit %d: %s", code, out)
	}
	r.Mark(time.Now(), "", "unban "+banned)
	// Unbanning does not move the role back.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	r.NoChange(from, time.Now())
	return nil
}
