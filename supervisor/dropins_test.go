package supervisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// TestStandbyWithoutGuardDoesNotCampaign (issue 13 item 5): a member whose
// managed unit lost the guard line (a later drop-in reset ExecStartPre=)
// must not take the lead, must say which unit and property and how to fix
// it, and the healthy member must lead instead.
func TestStandbyWithoutGuardDoesNotCampaign(t *testing.T) {
	w := newWorld(t)
	w.Options = func(name string, o *supervisor.Options) {
		if name != "m2" {
			return
		}
		mem := o.Units.(*fencing.Memory)
		for _, u := range units {
			b := fencing.Binding{Unit: u, BindsTo: []string{"kha-supervisor.service"}, After: []string{"kha-supervisor.service"},
				ExecStartPre: [][]string{{"/usr/bin/kha-supervisor", "guard", u}},
				TimeoutStop:  time.Second, KillMode: "control-group", SendSIGKILL: true}
			if u == units[1] {
				b.ExecStartPre = nil
			}
			mem.SetBinding(b)
		}
	}
	// The broken member comes first, alone: with the key free it would
	// win at once.
	b := w.Start("m2", nil)
	waitFor(t, "m2 registered", 10*time.Second, func() bool { return b.State() != group.Starting })
	time.Sleep(2 * time.Second) // eight polls with the key free
	st := b.Sup.Status()
	t.Logf("m2 after 2 s alone: %s, problems %q, mismatching checks %d", st.State, st.DropinProblems, st.DropinMismatches)
	if st.State != group.Standby {
		t.Fatalf("m2 is %s: it campaigned although %s has no guard", st.State, units[1])
	}
	if len(st.DropinProblems) != 1 || !strings.Contains(st.DropinProblems[0], units[1]+": ExecStartPre") ||
		!strings.Contains(st.DropinProblems[0], "kha-supervisor install-dropins") || st.DropinMismatches < 1 {
		t.Fatalf("m2 status problems %q (count %d): want one naming %s, ExecStartPre and install-dropins", st.DropinProblems, st.DropinMismatches, units[1])
	}
	a := w.Start("m1", nil)
	leader, _ := leaderOf(t, a, b)
	if leader != a {
		t.Fatalf("%s leads, want m1", leader.Name)
	}
	// install-dropins fixed it: m2 may take over again, and does when m1
	// steps down.
	mem := b.Units
	mem.SetBinding(fencing.Binding{Unit: units[1], BindsTo: []string{"kha-supervisor.service"}, After: []string{"kha-supervisor.service"},
		ExecStartPre: [][]string{{"/usr/bin/kha-supervisor", "guard", units[1]}},
		TimeoutStop:  time.Second, KillMode: "control-group", SendSIGKILL: true})
	waitFor(t, "m2's problems cleared", 5*time.Second, func() bool { return len(b.Sup.Status().DropinProblems) == 0 })
	a.Cancel()
	if err := a.WaitExit(t, 10*time.Second, "stop"); err != nil {
		t.Fatalf("m1 stop: %v", err)
	}
	if l, _ := leaderOf(t, b); l != b {
		t.Fatalf("%s leads, want m2", l.Name)
	}
	assertNoOverlap(t, a, b)
}

// A drop-in loaded by a daemon-reload just before the leader goes (lab
// scenario 30 in the default profile: the standby won 41 ms after the
// leader stopped, its periodic check 10 polls away) must stop the standby
// from campaigning: the bindings are read again right before a campaign.
func TestDropinBrokenJustBeforeTheLeaderStops(t *testing.T) {
	w := newWorld(t)
	good := func(u string) fencing.Binding {
		return fencing.Binding{Unit: u, BindsTo: []string{"kha-supervisor.service"}, After: []string{"kha-supervisor.service"},
			ExecStartPre: [][]string{{"/usr/bin/kha-supervisor", "guard", u}},
			TimeoutStop:  time.Second, KillMode: "control-group", SendSIGKILL: true}
	}
	w.Options = func(_ string, o *supervisor.Options) {
		for _, u := range units {
			o.Units.(*fencing.Memory).SetBinding(good(u))
		}
	}
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := leaderOf(t, a, b)
	standby := others[0]
	time.Sleep(time.Second) // the standby's periodic check has run and passed
	broken := good(units[1])
	broken.ExecStartPre = nil
	standby.Units.SetBinding(broken)
	leader.Cancel()
	if err := leader.WaitExit(t, 10*time.Second, "stop"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if st := standby.State(); st != group.Standby {
		t.Fatalf("%s is %s: it campaigned with %s's guard gone", standby.Name, st, units[1])
	}
}
