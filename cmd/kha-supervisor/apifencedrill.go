package main

import (
	"fmt"
	"io"
	"time"

	"github.com/kha-supervisor/kha-supervisor/apifence"
)

// apiHandover is the token handover in a drill's timeline (token mode),
// from the new leader's member record: the promotion writes the token and
// confirms it on every apiserver after winning the lease and before the
// units start.
type apiHandover struct {
	mode  string // the new leader's api_fence.mode; "" off or not recorded
	token int64  // the new leader's term
	got   int64  // the token it handed over
	at    time.Time
	took  time.Duration
}

// fillHandover reads the new leader's record until it carries the handover
// of its term (the record is rewritten when the units become active).
func (s *session) fillHandover(e env, t *timeline) {
	for range 30 {
		cs, err := s.cluster(e)
		if err == nil {
			for _, m := range cs.Members {
				if m.Node != t.newNode {
					continue
				}
				if m.APIFence == nil {
					return // off on that member: nothing to show
				}
				a := m.APIFence
				t.handover = apiHandover{mode: a.Mode, token: m.Token, got: a.Published, at: a.PublishedAt, took: time.Duration(a.TookMS) * time.Millisecond}
				if a.Mode != apifence.ModeToken || (a.Published != 0 && a.Published == m.Token) {
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h apiHandover) print(w io.Writer, at func(time.Time) string, node string) {
	if h.mode != apifence.ModeToken {
		return
	}
	fmt.Fprintf(w, "  %s  %s: token %d handed over to the apiservers (confirmed on every one in %s)\n", at(h.at), node, h.got, h.took)
}

// check: in token mode the handover of the new term is recorded, after the
// lease was won and before the units became active (one node's clock).
func (h apiHandover) check(t timeline) []string {
	if h.mode != apifence.ModeToken {
		return nil
	}
	switch {
	case h.at.IsZero() || h.got == 0:
		return []string{fmt.Sprintf("no record of %s's token handover", t.newNode)}
	case h.token != 0 && h.got != h.token:
		return []string{fmt.Sprintf("%s handed over token %d, not its term's %d", t.newNode, h.got, h.token)}
	case !t.leaseWon.IsZero() && h.at.Before(t.leaseWon):
		return []string{fmt.Sprintf("%s's token handover at %s is before it won the lease", t.newNode, h.at.Format("15:04:05.000"))}
	case !t.unitsActive.IsZero() && h.at.After(t.unitsActive):
		return []string{fmt.Sprintf("%s's units were active at %s, before its token handover at %s", t.newNode,
			t.unitsActive.Format("15:04:05.000"), h.at.Format("15:04:05.000"))}
	}
	return nil
}
