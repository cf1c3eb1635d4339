package commits

import (
	"cmp"
	"slices"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// match finds, for each commit, the request that made it among the audit
// events, in two steps.
//
// First by revision: an accepted write whose answer carries the object
// (the lab logs the managed components' creates, updates and patches with
// their answers) names the revision etcd committed it at, its
// resourceVersion. That pairing is exact, and a request so answered made
// no other write.
//
// Then the rest by object, verb and time: the same object and a verb that
// writes it that way, a request the apiserver accepted (it wrote, unless
// it was a no-op update) or one whose answer does not say it wrote nothing
// (a timeout or an internal error: 5xx, or none), and a request whose
// times fit the commit's place in etcd's order (window). One request
// makes one write: the commits and the requests are paired by a maximum
// matching (augmenting paths), each commit trying its candidates in order
// of preference: accepted first, then the closest in time (a create's
// creationTimestamp, else the first received). Creates, bindings and
// deletes are one write per object, so their pairing is exact unless the
// audit log names no object (a create with generateName: paired by the
// creationTimestamp, which has seconds); several updates of one object
// without their answers pair in the order of their requests, which can
// pair one master's write with the other's request (seen on the real
// plane before the answers were logged: the new master's ReplicaSet
// status updates judged the old master's late commits).
func match(commits []Commit, evs []audit.Event) {
	byRV := answersByRevision(evs)
	byRevision(commits, evs, byRV)
	win := windows(commits)
	floor := keyFloors(commits, evs, byRV)
	byObj := map[objKey][]int{}
	var collections []int // deletecollection: one request, many writes
	for i, e := range evs {
		if !e.Write() || e.DryRun || !(e.Accepted() || mayHaveWritten(e)) || (e.Accepted() && e.RV != 0) {
			continue // an accepted answer with its revision was paired by it
		}
		if e.Verb == "deletecollection" {
			collections = append(collections, i)
			continue
		}
		k := objKey{e.Resource, e.Namespace, e.Name}
		byObj[k] = append(byObj[k], i)
	}
	cands := make([][]int, len(commits))
	for i, c := range commits {
		if c.Request != nil {
			continue
		}
		o := c.Object
		all := byObj[objKey{o.Resource, o.Namespace, o.Name}]
		if o.Kind == Create {
			all = append(slices.Clone(all), byObj[objKey{o.Resource, o.Namespace, ""}]...)
		}
		for _, j := range all {
			if writes(evs[j], o) && win[i].fits(evs[j]) && !beforeCreation(evs[j], o) && !answeredBefore(evs[j], floor[i]) {
				cands[i] = append(cands[i], j)
			}
		}
		slices.SortStableFunc(cands[i], func(a, b int) int { return prefer(evs[a], evs[b], o) })
	}
	owner := map[int]int{} // event -> commit
	for i := range commits {
		augment(i, cands, owner, map[int]bool{})
	}
	for j, i := range owner {
		commits[i].Request = &evs[j]
	}
	twoWriteDeletes(commits)
	for i := range commits {
		c := &commits[i]
		if c.Request != nil || (c.Object.Kind != Delete && c.Object.Kind != Deleting && c.Object.Kind != Update) {
			continue
		}
		// The latest deletecollection of the object's collection that
		// fits: a namespace deleted in every trial (the drill's) has one
		// per trial, and an earlier trial's cannot have deleted an object
		// created after it (a drill trial's pod deletes were judged late
		// commits of the previous trial's controller-manager).
		best := -1
		for _, j := range collections {
			e := evs[j]
			if e.Resource != c.Object.Resource || e.Namespace != c.Object.Namespace || !win[i].fits(e) || beforeCreation(e, c.Object) || answeredBefore(e, floor[i]) {
				continue
			}
			if b := evs[max(best, 0)]; best < 0 || (e.Accepted() && !b.Accepted()) || (e.Accepted() == b.Accepted() && e.Received.After(b.Received)) {
				best = j
			}
		}
		if best >= 0 {
			c.Request = &evs[best]
		}
	}
}

// keyFloors are, for each commit (by revision), the earliest its request
// can have been answered: the arrival of the request that made the last
// earlier write of the same key paired by revision (so exactly known).
// The apiserver writes an existing key only under a compare of its mod
// revision with the one it read (GuaranteedUpdate for updates, patches and
// bindings; a conditional delete), so the request that made this commit
// read that earlier write, which was made after its own request arrived,
// and was still being served then: it cannot have been answered before.
// A 504 answered fifty minutes before the trial was paired with a write
// of a Lease without this (real plane, 3 December, le-tuned 44, a late
// commit that was not). A create compares with no earlier write (the key
// is absent): no floor.
//
// The key's first write in the recording has its earlier write before the
// recording began; its floor is then the arrival of the accepted request
// answered with that write's revision (Write.PrevRev), when the audit logs
// have one: two late commits of a le-tuned trial of 76 (5 December) were
// paired with a Lease update answered 504 in an earlier trial (byRV:
// answersByRevision).
func keyFloors(commits []Commit, evs []audit.Event, byRV map[int64][]int) []time.Time {
	floor := make([]time.Time, len(commits))
	last := map[string]time.Time{} // key -> arrival of its latest paired write
	for i, c := range commits {
		if c.Object.Kind != Create {
			floor[i] = last[c.Write.Key]
			if at := arrivalOf(evs, byRV[c.Write.PrevRev], c.Object); at.After(floor[i]) {
				floor[i] = at
			}
		}
		if c.Request != nil && c.Request.Received.After(last[c.Write.Key]) {
			last[c.Write.Key] = c.Request.Received
		}
	}
	return floor
}

// arrivalOf is the earliest arrival among the requests js (answered with
// one revision) of object o (zero: none). A revision names one write; a
// later no-op update answered with it arrived later, so the earliest is
// the one that made it, or gives an earlier floor than its own.
func arrivalOf(evs []audit.Event, js []int, o Object) time.Time {
	var at time.Time
	for _, j := range js {
		e := evs[j]
		if e.Resource == o.Resource && e.Namespace == o.Namespace && (e.Name == o.Name || e.Name == "") && (at.IsZero() || e.Received.Before(at)) {
			at = e.Received
		}
	}
	return at
}

// answeredBefore: request e was answered before floor (an entry without
// an answer's time is not excluded).
func answeredBefore(e audit.Event, floor time.Time) bool {
	return !floor.IsZero() && !e.Completed.IsZero() && e.Completed.Before(floor)
}

// beforeCreation: request e arrived before the object it would have
// written existed (its creationTimestamp, whole seconds: only a request
// received before that second is excluded), so it did not write it. A
// create is judged by writes instead.
func beforeCreation(e audit.Event, o Object) bool {
	return o.Kind != Create && !o.Created.IsZero() && e.Received.Before(o.Created)
}

// twoWriteDeletes shares a delete request between a delete and its key's
// write just before it, whichever of the two the matching left unpaired:
// a graceful delete with a zero grace period (a bound pod's) is two writes
// of one request, the update that sets deletionTimestamp, then the delete.
func twoWriteDeletes(commits []Commit) {
	last := map[string]*Commit{} // key -> its latest write so far
	for i := range commits {
		c := &commits[i]
		if p := last[c.Write.Key]; c.Object.Kind == Delete && p != nil && (p.Object.Kind == Deleting || p.Object.Kind == Update) {
			switch {
			case c.Request == nil && p.Request != nil && p.Request.Verb == "delete":
				c.Request = p.Request
			case p.Request == nil && c.Request != nil && c.Request.Verb == "delete":
				p.Request = c.Request
			}
		}
		last[c.Write.Key] = c
	}
}

// answersByRevision indexes the accepted writes answered with the object
// by the revision in the answer.
func answersByRevision(evs []audit.Event) map[int64][]int {
	byRV := map[int64][]int{}
	for j, e := range evs {
		if e.Write() && !e.DryRun && e.Accepted() && e.RV != 0 {
			byRV[e.RV] = append(byRV[e.RV], j)
		}
	}
	return byRV
}

// byRevision pairs each commit with the accepted write answered with the
// object at the commit's revision (the earliest completed, should a no-op
// update have answered the same object).
func byRevision(commits []Commit, evs []audit.Event, byRV map[int64][]int) {
	for i := range commits {
		c := &commits[i]
		js := byRV[c.Write.Rev]
		slices.SortStableFunc(js, func(a, b int) int { return evs[a].Completed.Compare(evs[b].Completed) })
		for _, j := range js {
			e := evs[j]
			if e.Resource == c.Object.Resource && e.Namespace == c.Object.Namespace &&
				(e.Name == c.Object.Name || e.Name == "" && c.Object.Kind == Create) && writes(e, c.Object) {
				c.Request = &evs[j]
				break
			}
		}
	}
}

// window bounds when etcd committed a write, from the writes paired by
// revision around it: after the latest such write before it was received
// (lo), before the earliest such write after it was answered (hi).
type window struct{ lo, hi time.Time }

// fits: request e may have made the write: it arrived before the write
// was committed and, answered as accepted, was answered after.
func (w window) fits(e audit.Event) bool {
	if !w.hi.IsZero() && e.Received.After(w.hi) {
		return false
	}
	return !e.Accepted() || w.lo.IsZero() || !e.Completed.Before(w.lo)
}

// windows are the commits' windows (commits by revision; zero bounds: none
// known).
func windows(commits []Commit) []window {
	win := make([]window, len(commits))
	var lo time.Time
	for i, c := range commits {
		if r := c.Request; r != nil && r.Received.After(lo) {
			lo = r.Received
		}
		win[i].lo = lo
	}
	var hi time.Time
	for i := len(commits) - 1; i >= 0; i-- {
		if r := commits[i].Request; r != nil && (hi.IsZero() || r.Completed.Before(hi)) {
			hi = r.Completed
		}
		win[i].hi = hi
	}
	return win
}

// augment finds commit i a request, taking one from another commit that
// can use another (Kuhn's augmenting path).
func augment(i int, cands [][]int, owner map[int]int, seen map[int]bool) bool {
	for _, j := range cands[i] {
		if seen[j] {
			continue
		}
		seen[j] = true
		if k, taken := owner[j]; !taken || augment(k, cands, owner, seen) {
			owner[j] = i
			return true
		}
	}
	return false
}

// prefer orders two candidate requests for a write of o.
func prefer(a, b audit.Event, o Object) int {
	if a.Accepted() != b.Accepted() {
		if a.Accepted() {
			return -1
		}
		return 1
	}
	if o.Kind == Create && !o.Created.IsZero() {
		return cmp.Compare(dist(a.Received, o.Created), dist(b.Received, o.Created))
	}
	return a.Received.Compare(b.Received)
}

// dist is how far a request's arrival (seconds, as creationTimestamp) is
// from the object's creation.
func dist(received, created time.Time) time.Duration {
	d := created.Sub(received.Truncate(time.Second))
	if d < 0 {
		return -d
	}
	return d
}

type objKey struct{ resource, namespace, name string }

// writes reports whether request e could have made a write of o's kind.
func writes(e audit.Event, o Object) bool {
	switch o.Kind {
	case Create:
		if (e.Verb == "update" || e.Verb == "patch") && e.Subresource == "" && e.Name != "" {
			return true // create on update, server-side apply
		}
		if e.Verb != "create" || e.Subresource != "" {
			return false
		}
		if e.Name != "" {
			return true
		}
		// A generated name: the object was created while the request was
		// served (creationTimestamp has seconds), and by the same role.
		return e.Role() == o.Role && !o.Created.Before(e.Received.Truncate(time.Second)) && !o.Created.After(e.Completed)
	case Binding:
		return e.Verb == "create" && e.Subresource == "binding"
	case Delete, Deleting:
		return e.Verb == "delete" && e.Subresource == "" || e.Verb == "deletecollection"
	}
	// Update: a delete of an object with finalizers updates it again.
	switch e.Verb {
	case "update", "patch":
		return true
	case "delete", "deletecollection":
		return e.Subresource == ""
	}
	return false
}

// mayHaveWritten: an answer that does not say the write was refused or
// failed before reaching etcd (a timeout, an internal error, no answer).
func mayHaveWritten(e audit.Event) bool { return e.Code == 0 || e.Code >= 500 }
