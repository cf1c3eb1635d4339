package supervisor

import (
	"fmt"
	"sort"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// campaignView is what a standby decides on whether to try for the key.
type campaignView struct {
	Self          string
	CooldownUntil time.Time
	Ctl           group.Control
	UnitsSeen     bool                    // the units were observed since the last job
	UnitsRunning  []string                // of ours, as last observed
	Members       map[string]group.Record // every record as last read (ours included)
	DropinsOK     bool                    // the managed units' drop-ins were checked and are in order
	NewestToken   int64                   // the newest election token seen held (groupSeen.newestToken)
}

// campaignVerdict: Allowed to campaign; Override when only because nobody
// else is eligible while we are in cooldown.
type campaignVerdict struct {
	Allowed  bool
	Override bool
	Why      string
}

// decideCampaign is campaign eligibility as a pure function of the view and
// the time. A cooldown keeps a node with a flaky unit out of the election
// so that another gets the chance; when no other member could take it, a
// flaky component beats none, and the cooldown yields.
func decideCampaign(now time.Time, v campaignView) campaignVerdict {
	switch {
	case v.Ctl.Freeze != nil:
		return campaignVerdict{Why: "the group is frozen"}
	case v.Ctl.Banned(v.Self):
		return campaignVerdict{Why: "this node is banned"}
	case handoffExcludes(v.Ctl.Handoff, v.Self, v.NewestToken):
		return campaignVerdict{Why: "a switchover to another member is under way"}
	case !v.DropinsOK:
		return campaignVerdict{Why: "the managed units' drop-ins are not in order"}
	case !v.UnitsSeen:
		return campaignVerdict{Why: "the units were not observed yet"}
	case len(v.UnitsRunning) > 0:
		return campaignVerdict{Why: fmt.Sprintf("units %v still run here", v.UnitsRunning)}
	case !now.Before(v.CooldownUntil):
		return campaignVerdict{Allowed: true, Why: "eligible"}
	}
	if v.Members == nil {
		return campaignVerdict{Why: fmt.Sprintf("in cooldown until %s; the other members not read yet", v.CooldownUntil.Format(time.RFC3339))}
	}
	if others := eligibleOthers(now, v); len(others) > 0 {
		return campaignVerdict{Why: fmt.Sprintf("in cooldown until %s; %v may take over", v.CooldownUntil.Format(time.RFC3339), others)}
	}
	return campaignVerdict{Allowed: true, Override: true,
		Why: fmt.Sprintf("in cooldown until %s, but no other member is eligible", v.CooldownUntil.Format(time.RFC3339))}
}

// handoffExcludes: a switchover request keeps self out of the election
// while it stands, unless a leadership newer than the one it asked to step
// down was seen: then it is fulfilled (its clear may have failed, or not
// be read yet) and binds nobody.
func handoffExcludes(h *group.Handoff, self string, newest int64) bool {
	return h != nil && newest <= h.Token && (h.From == self || (h.To != "" && h.To != self))
}

// eligibleOthers lists the other members whose records say they could
// campaign now: standby, units stopped, not in cooldown, not banned.
func eligibleOthers(now time.Time, v campaignView) []string {
	var out []string
	for n, r := range v.Members {
		if n == v.Self || r.State != group.Standby || r.UnitsRunning || now.Before(r.Cooldown) || v.Ctl.Banned(n) || handoffExcludes(v.Ctl.Handoff, n, v.NewestToken) {
			continue
		}
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// campaignView gathers the loop's latest observations.
func (s *Supervisor) campaignView() campaignView {
	return campaignView{Self: s.cfg.Node, CooldownUntil: s.loop.cooldown, Ctl: s.seen.ctl, UnitsSeen: !s.watch.lastAt.IsZero(),
		UnitsRunning: runningUnits(s.watch.last), Members: s.seen.members, DropinsOK: s.dropins.allowCampaign(),
		NewestToken: max(s.seen.newestToken, s.term.token)}
}

// eligible lists who could campaign now as this member sees it (status).
func (s *Supervisor) eligible(now time.Time) []string {
	v := s.campaignView()
	out := eligibleOthers(now, v)
	if s.loop.state == group.Standby && decideCampaign(now, v).Allowed {
		out = append(out, s.cfg.Node)
		sort.Strings(out)
	}
	return out
}
