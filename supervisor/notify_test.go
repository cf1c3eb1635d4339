package supervisor_test

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
)

// statusLog keeps every member's STATUS= messages with their arrival time.
type statusLog struct {
	mu   sync.Mutex
	msgs map[string][]statusMsg
}

type statusMsg struct {
	at   time.Time
	text string
}

func (l *statusLog) notify(name string) func(string) {
	return func(msg string) {
		text, ok := strings.CutPrefix(msg, "STATUS=")
		if !ok {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		l.msgs[name] = append(l.msgs[name], statusMsg{time.Now(), text})
	}
}

// since returns name's messages from t on.
func (l *statusLog) since(name string, t time.Time) []statusMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []statusMsg
	for _, m := range l.msgs[name] {
		if !m.at.Before(t) {
			out = append(out, m)
		}
	}
	return out
}

func (l *statusLog) last(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ms := l.msgs[name]; len(ms) > 0 {
		return ms[len(ms)-1].text
	}
	return ""
}

var leaseValid = regexp.MustCompile(`^active; token \d+, lease valid \d+\.\ds$`)

// TestStatusLineFollowsTheTruth: `systemctl status` shows what STATUS= said
// last, so it must follow the member: the leader's line is refreshed every
// few seconds while nothing happens (its lease time left moves), and a
// standby names the current leader and token, also when the leader
// changed without the standby changing state.
func TestStatusLineFollowsTheTruth(t *testing.T) {
	w := supervisortest.NewWorld(t, 3)
	sl := &statusLog{msgs: map[string][]statusMsg{}}
	w.Options = func(name string, o *supervisor.Options) { o.Notify = sl.notify(name) }
	a, b, c := w.Start("m1", nil), w.Start("m2", nil), w.Start("m3", nil)
	leader, others := leaderOf(t, a, b, c)

	standbyLine := func(l *member) string {
		return fmt.Sprintf("standby; leader %s, token %d", l.Name, l.Sup.Status().Token)
	}
	for _, m := range others {
		waitFor(t, m.Name+"'s STATUS= naming leader "+leader.Name, 15*time.Second, func() bool {
			return sl.last(m.Name) == standbyLine(leader)
		})
	}

	// Quiet period: the leader refreshes its line. Generous: at least two
	// refreshes in 12 s (the daemon refreshes every 2 s).
	from := time.Now()
	time.Sleep(12 * time.Second)
	msgs := sl.since(leader.Name, from)
	if len(msgs) < 2 {
		t.Errorf("leader %s sent %d STATUS= in 12s of quiet, want a refresh every few seconds: %v", leader.Name, len(msgs), msgs)
	}
	for _, m := range msgs {
		if !leaseValid.MatchString(m.text) {
			t.Errorf("leader's STATUS=%q, want %q", m.text, leaseValid)
		}
	}

	// The leader leaves; of the two standbys one takes over and the other
	// stays standby without a transition of its own: its line must name
	// the new leader.
	leader.Cancel()
	if err := leader.WaitExit(t, 30*time.Second, "graceful stop"); err != nil {
		t.Fatalf("%s: %v", leader.Name, err)
	}
	next, rest := leaderOf(t, others...)
	waitFor(t, rest[0].Name+"'s STATUS= naming the new leader "+next.Name, 15*time.Second, func() bool {
		return sl.last(rest[0].Name) == standbyLine(next)
	})
}
