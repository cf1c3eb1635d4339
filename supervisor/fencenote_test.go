package supervisor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// A fencing process may not reach etcd to record its fence; it leaves a note
// in the run state, and its successor publishes it at its original time.
func TestSuccessorPublishesItsPredecessorsFence(t *testing.T) {
	w := newWorld(t)
	at := time.Now().Add(-3 * time.Second).UTC()
	st := runstate.State{Node: "m1", Cluster: "test", Incarnation: "dead00000001", SavedAt: at,
		Fenced: &runstate.Fenced{At: at, Kind: "deadline", Reason: "renewal deadline passed", Token: 41}}
	if err := (runstate.Store{Dir: w.StateDir("m1")}).Save(st); err != nil {
		t.Fatal(err)
	}
	m := w.Start("m1", nil)
	var found *group.Event
	waitFor(t, "the predecessor's fence in the history", 15*time.Second, func() bool {
		evs, err := group.ReadHistory(context.Background(), w.Admin, m.Sup.Keys(), 0)
		if err != nil {
			return false
		}
		for i, e := range evs {
			if e.Kind == "fenced" && e.Node == "m1" {
				found = &evs[i]
				return true
			}
		}
		return false
	})
	if !found.At.Equal(at) || found.Token != 41 || found.To != group.Fenced || !strings.Contains(found.Reason, "renewal deadline passed") {
		t.Fatalf("history event %+v: want the fence at %s, token 41, with its reason", *found, at)
	}
	// Published once: the note is gone from the run state. The historian
	// writes the event on its own goroutine while the registration saves
	// the run state (with an fsync), so the event can be seen first: wait.
	var got runstate.State
	var err error
	waitFor(t, "this incarnation's run state", 5*time.Second, func() bool {
		got, _, err = (runstate.Store{Dir: w.StateDir("m1")}).Load()
		return err != nil || got.Incarnation != st.Incarnation
	})
	if err != nil || got.Fenced != nil || got.Incarnation == st.Incarnation {
		t.Fatalf("run state after start-up: %+v (err %v): want this incarnation's, without the note", got, err)
	}
}
