package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing"
)

func TestDecide(t *testing.T) {
	const unit = "kube-scheduler.service"
	active := Status{Node: "m1", Cluster: "c", State: "active", Leader: "m1", Token: 1234,
		UnitsAllowed: true, LeaseLeft: 6 * time.Second, StopMax: 3 * time.Second}
	with := func(f func(*Status)) Status { s := active; f(&s); return s }

	tests := []struct {
		name    string
		s       Status
		allowed bool
		want    []string // substrings of the message, in order
	}{
		{"active with room", active, true,
			[]string{"kube-scheduler.service may start on m1", "active", "token 1234", "6s left"}},
		{"exactly StopMax left", with(func(s *Status) { s.LeaseLeft = 3 * time.Second }), true, nil},
		{"promoting after the barrier", with(func(s *Status) { s.State = "promoting" }), true, []string{"promoting"}},
		{"standby, leader known",
			Status{Node: "m2", State: "standby", Leader: "m1", Token: 1234, StopMax: 3 * time.Second}, false,
			[]string{"kha-supervisor: refusing to start kube-scheduler.service on m2: this node is standby; leader is m1 (token 1234)"}},
		{"standby, no leader",
			Status{Node: "m2", State: "standby", StopMax: 3 * time.Second}, false,
			[]string{"refusing to start kube-scheduler.service on m2: this node is standby; no leader is known"}},
		{"standby, leader without token",
			Status{Node: "m2", State: "standby", Leader: "m1"}, false,
			[]string{"leader is m1"}},
		{"lease under StopMax", with(func(s *Status) { s.LeaseLeft = 1200 * time.Millisecond }), false,
			[]string{"refusing to start kube-scheduler.service on m1", "lease has 1.2s left, under the 3s needed to stop it", "leader is this node (token 1234)"}},
		{"lease just under StopMax", with(func(s *Status) { s.LeaseLeft = 3*time.Second - time.Nanosecond }), false,
			[]string{"lease has", "under the 3s needed"}},
		{"lease gone, zero StopMax", with(func(s *Status) { s.LeaseLeft = 0; s.StopMax = 0 }), false,
			[]string{"lease has 0s left"}},
		{"lease negative", with(func(s *Status) { s.LeaseLeft = -2 * time.Second }), false,
			[]string{"lease has 0s left"}},
		{"holds lease, before the barrier", with(func(s *Status) { s.State = "promoting"; s.UnitsAllowed = false }), false,
			[]string{"this node is promoting and may not run units now; leader is this node (token 1234)"}},
		{"demoting", with(func(s *Status) { s.State = "demoting"; s.UnitsAllowed = false }), false,
			[]string{"this node is demoting"}},
		{"fencing with plenty of lease", with(func(s *Status) { s.State = "fencing"; s.UnitsAllowed = false; s.LeaseLeft = time.Hour }), false,
			[]string{"this node is fencing"}},
		{"empty status", Status{}, false,
			[]string{"on (unknown): this node is (unknown); no leader is known"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Decide(unit, tc.s)
			if a.Allowed != tc.allowed {
				t.Fatalf("Allowed = %v, want %v (message %q)", a.Allowed, tc.allowed, a.Message)
			}
			if a.Unit != unit || a.Status != tc.s {
				t.Fatalf("answer does not carry the request: %+v", a)
			}
			if strings.ContainsAny(a.Message, "\n\r") {
				t.Fatalf("message is not one line: %q", a.Message)
			}
			rest := a.Message
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("message %q lacks %q (in order)", a.Message, w)
				}
				rest = rest[i+len(w):]
			}
			if !tc.allowed && !strings.HasPrefix(a.Message, "kha-supervisor: refusing to start ") {
				t.Fatalf("refusal does not start with the standard prefix: %q", a.Message)
			}
		})
	}
}

// TestStatusOf: the guard decides from the term's one predicate. A term
// past its fence instant is refused even while its lease still has S_max
// left (the old threshold admitted starts until max(delta, W) after it).
func TestStatusOf(t *testing.T) {
	const unit = "kube-scheduler.service"
	t0 := time.Unix(1000, 0)
	w := fencing.Window{TTL: 10 * time.Second, StopMax: 3 * time.Second, Slack: 500 * time.Millisecond, Watchdog: 2 * time.Second}
	d := fencing.NewDeadlineClock(w, fencing.IdentityClock{})
	d.Renewed("election", t0, w.TTL)
	fenceAt := t0.Add(w.Span(w.TTL))
	leader := d.Term(fencing.Term{Node: "m1", State: "active", Leader: "m1", LeaderToken: 1234, Token: 1234, Open: true, StopMax: w.StopMax})

	a := Decide(unit, StatusOf(leader, fenceAt.Add(-time.Millisecond)))
	if !a.Allowed || a.Status.Token != 1234 || a.Status.LeaseLeft != w.StopMax+w.Margin()+time.Millisecond {
		t.Fatalf("before the fence instant: %+v", a)
	}
	late := StatusOf(leader, fenceAt.Add(w.Margin()/2))
	if late.LeaseLeft < late.StopMax {
		t.Fatalf("lease left %v under S_max %v: the case does not test the margin", late.LeaseLeft, late.StopMax)
	}
	if a := Decide(unit, late); a.Allowed || !strings.Contains(a.Message, "may not run units now") {
		t.Fatalf("after the fence instant: %+v", a)
	}
	standby := fencing.Term{Node: "m2", State: "standby", Leader: "m1", LeaderToken: 1234, StopMax: w.StopMax}
	s := StatusOf(standby, t0)
	if s.Leader != "m1" || s.Token != 1234 || s.UnitsAllowed || s.LeaseLeft != 0 {
		t.Fatalf("standby: %+v", s)
	}
	if a := Decide(unit, s); a.Allowed || !strings.Contains(a.Message, "this node is standby; leader is m1 (token 1234)") {
		t.Fatalf("standby: %+v", a)
	}
}
