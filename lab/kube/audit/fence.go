package audit

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/apifence"
)

// FenceReport is the verdict of the fence at the API server (api_fence.mode
// = "token"), from what the apiservers accepted and refused of the managed
// components' users (apifence.ManagedUsers).
type FenceReport struct {
	Accepted int            // managed writes accepted (dry runs left out)
	ByToken  map[string]int // accepted, by the token they carried ("none")
	Refused  int            // managed writes refused by the token policy (422)
	DryRuns  int            // the publishers' confirmation probes admitted
	// Stale are the writes of a stale term accepted: sent with the
	// component's own credential (no gate), without exactly one token, or
	// with a token lower than one a write had already been accepted with
	// when it arrived (a later term had begun writing).
	Stale []StaleWrite
}

// StaleWrite is one accepted write the fence should have refused.
type StaleWrite struct {
	Event
	Why string
}

func (s StaleWrite) String() string {
	return fmt.Sprintf("%s %s %s by %s from %s at %s: %s", s.Server, s.Verb, s.Object(), s.User, s.SourceIP,
		s.Received.Format("15:04:05.000"), s.Why)
}

// Managed reports whether e was sent as a user the policy fences.
func Managed(e Event) bool { return slices.Contains(managed, e.User) }

var managed = apifence.ManagedUsers()

// PolicyRefusal reports a write the token policy refused.
func PolicyRefusal(e Event) bool {
	return e.Code == 422 && strings.Contains(e.Message, apifence.PolicyName)
}

// Fence judges events in o's window (o.Masters unused). The term a write
// belongs to is its token; a term is superseded once a write with a higher
// token was accepted (its leader published, confirmed and started its
// units): an accepted write of a lower token received after that is stale.
// Before that instant an old token's write is not concurrent with any write
// of the new term, whatever the parameter's cache said.
func Fence(events []Event, o Options) FenceReport {
	rep := FenceReport{ByToken: map[string]int{}}
	var acc []Event
	for _, e := range events {
		if (!o.From.IsZero() && e.Completed.Before(o.From)) || (!o.To.IsZero() && e.Completed.After(o.To)) {
			continue
		}
		if !Managed(e) || !e.Write() {
			continue
		}
		switch {
		case PolicyRefusal(e):
			rep.Refused++
		case !e.Accepted():
		case e.DryRun:
			rep.DryRuns++
		default:
			acc = append(acc, e)
		}
	}
	sort.SliceStable(acc, func(i, j int) bool { return acc[i].Completed.Before(acc[j].Completed) })
	// maxBefore[i]: the highest token among acc[:i+1] (by completion).
	maxBefore := make([]int64, len(acc))
	var hi int64
	for i, e := range acc {
		if t, ok := tokenOf(e); ok && t > hi {
			hi = t
		}
		maxBefore[i] = hi
	}
	for _, e := range acc {
		rep.Accepted++
		t, ok := tokenOf(e)
		rep.ByToken[tokenLabel(e)]++
		why := ""
		switch {
		case e.Impersonator == "":
			why = "accepted with the component's own credential (no gate, no token)"
		case !ok:
			why = fmt.Sprintf("accepted without one fencing token (%v)", e.Token)
		default:
			// Writes completed before this one arrived.
			n := sort.Search(len(acc), func(i int) bool { return !acc[i].Completed.Before(e.Received) })
			if n > 0 && maxBefore[n-1] > t {
				why = fmt.Sprintf("token %d accepted after a write of token %d had been", t, maxBefore[n-1])
			}
		}
		if why != "" {
			rep.Stale = append(rep.Stale, StaleWrite{Event: e, Why: why})
		}
	}
	return rep
}

func tokenOf(e Event) (int64, bool) {
	if e.Impersonator == "" || len(e.Token) != 1 {
		return 0, false
	}
	t, err := strconv.ParseInt(e.Token[0], 10, 64)
	return t, err == nil
}

func tokenLabel(e Event) string {
	switch {
	case e.Impersonator == "":
		return "own-credential"
	case len(e.Token) == 0:
		return "none"
	}
	return strings.Join(e.Token, ",")
}

// String summarises the report in one line.
func (r FenceReport) String() string {
	return fmt.Sprintf("managed writes accepted %d (by token %v), refused by the policy %d, stale accepted %d, dry-run probes %d",
		r.Accepted, r.ByToken, r.Refused, len(r.Stale), r.DryRuns)
}

// Since counts o's accepted and policy-refused managed writes received at
// or after from and sent from master m (Options.Master).
func Since(events []Event, o Options, m string, from time.Time) (accepted, refused int) {
	for _, e := range events {
		if !Managed(e) || !e.Write() || e.DryRun || e.Received.Before(from) || o.Master(e) != m {
			continue
		}
		if e.Accepted() {
			accepted++
		} else if PolicyRefusal(e) {
			refused++
		}
	}
	return accepted, refused
}

// LastAccepted is the completion of the last accepted managed write from
// master m received at or after from (zero: none).
func LastAccepted(events []Event, o Options, m string, from time.Time) time.Time {
	var last time.Time
	for _, e := range events {
		if Managed(e) && e.Write() && !e.DryRun && e.Accepted() && !e.Received.Before(from) && o.Master(e) == m && e.Completed.After(last) {
			last = e.Completed
		}
	}
	return last
}
