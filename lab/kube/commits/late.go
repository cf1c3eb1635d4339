package commits

import (
	"slices"
	"time"
)

// late finds role's late commits among commits (by revision). A term is
// the fencing token its requests carried when every attributed write
// carries one (the gate's and token modes), else the master that wrote:
// masters are ordered by their first request's arrival, so an old term
// that committed nothing before its successor is still the earlier term.
// A write is late when a later term's first write has a lower revision;
// without tokens only if its request also arrived before that first write
// was answered (a write of the same master sent afterwards belongs to a
// term of its own, which the audit judge's overlap covers).
func late(commits []Commit, role string) []Late {
	var cs []Commit
	tokens := true
	for _, c := range commits {
		if c.Role != role || c.Master == "" || c.Request == nil {
			continue
		}
		cs = append(cs, c)
		tokens = tokens && c.Token > 0
	}
	if len(cs) == 0 {
		return nil
	}
	if tokens {
		return lateByToken(cs)
	}
	return lateByMaster(cs)
}

func lateByToken(cs []Commit) []Late {
	first := map[int64]Commit{} // a term's first committed write
	for _, c := range cs {
		if f, ok := first[c.Token]; !ok || c.Write.Rev < f.Write.Rev {
			first[c.Token] = c
		}
	}
	var out []Late
	for _, c := range cs {
		var next *Commit
		for t, f := range first {
			if t > c.Token && f.Write.Rev < c.Write.Rev && (next == nil || f.Write.Rev < next.Write.Rev) {
				next = &f
			}
		}
		if next != nil {
			out = append(out, Late{Commit: c, Next: *next})
		}
	}
	return out
}

func lateByMaster(cs []Commit) []Late {
	first := map[string]Commit{}      // a master's first committed write
	arrived := map[string]time.Time{} // its first request's arrival
	for _, c := range cs {
		m := c.Master
		if f, ok := first[m]; !ok || c.Write.Rev < f.Write.Rev {
			first[m] = c
		}
		if a, ok := arrived[m]; !ok || c.Request.Received.Before(a) {
			arrived[m] = c.Request.Received
		}
	}
	order := make([]string, 0, len(first))
	for m := range first {
		order = append(order, m)
	}
	slices.SortFunc(order, func(a, b string) int { return arrived[a].Compare(arrived[b]) })
	var out []Late
	for _, c := range cs {
		i := slices.Index(order, c.Master)
		var next *Commit
		for _, m := range order[i+1:] {
			f := first[m]
			if f.Write.Rev < c.Write.Rev && c.Request.Received.Before(f.Request.Completed) && (next == nil || f.Write.Rev < next.Write.Rev) {
				next = &f
			}
		}
		if next == nil {
			next = inFlightAcross(cs, c)
		}
		if next != nil {
			out = append(out, Late{Commit: c, Next: *next})
		}
	}
	return out
}

// inFlightAcross is the first write of another master that committed
// while c was in flight: c's request had arrived before that write's
// request did, and c committed after it. Whatever the terms' order, c's
// master was still writing when another had begun. It catches what the
// order by first arrival cannot: a master's writes after another master's
// second term began (terms A, B, A: B's write that arrived before A wrote
// again and committed after). Arrivals, not answers: a paused apiserver
// answers at the thaw what it committed before the pause.
func inFlightAcross(cs []Commit, c Commit) *Commit {
	var next *Commit
	for i := range cs {
		f := &cs[i]
		if f.Master != c.Master && f.Write.Rev < c.Write.Rev && c.Request.Received.Before(f.Request.Received) &&
			(next == nil || f.Write.Rev < next.Write.Rev) {
			next = f
		}
	}
	return next
}
