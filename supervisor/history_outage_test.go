package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// An event recorded while etcd does not answer is kept and written, with
// its original time, once etcd answers again (it used to be dropped after
// one failed request).
func TestHistoryWrittenAfterAnOutage(t *testing.T) {
	w := newWorld(t)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	_, others := leaderOf(t, a, b)
	standby := others[0]
	standby.Cut(true)
	at := time.Now().UTC().Truncate(time.Millisecond)
	standby.Sup.RecordHistory(group.Event{At: at, Node: standby.Name, From: group.Standby, To: group.Standby,
		Kind: "test_outage", Reason: "recorded while etcd was unreachable"})
	time.Sleep(2 * time.Second) // several failed writes (request timeout 400 ms), well inside the member lease
	standby.Cut(false)
	waitFor(t, "the event recorded during the outage in history", 15*time.Second, func() bool {
		evs, err := group.ReadHistory(context.Background(), w.Admin, standby.Sup.Keys(), 0)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Kind == "test_outage" {
				if !e.At.Equal(at) {
					t.Fatalf("written with time %s, want the original %s", e.At, at)
				}
				return true
			}
		}
		return false
	})
}
