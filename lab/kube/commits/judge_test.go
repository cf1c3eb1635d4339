package commits

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// The stored recordings (testdata/, TestRecordEtcdCommits): etcd's own
// revisions of a clean handoff, of one whose old term's writes were held
// in a partitioned connection and committed after the new term's first
// write, and of one whose answer was lost (504) though etcd committed.

func TestJudgeCleanRecording(t *testing.T) { checkClean(t, judge(t, loadCase(t, "clean"))) }

func TestJudgeCatchesLateCommits(t *testing.T) { checkLate(t, judge(t, loadCase(t, "late"))) }

func TestJudgeFindsGhostWrite(t *testing.T) { checkGhost(t, judge(t, loadCase(t, "ghost"))) }

// Every recorded value decodes as what it is, and the admin's own pod
// (created and deleted, no managed writer) is no managed commit.
func TestDecodeRecordedWrites(t *testing.T) {
	c := loadCase(t, "clean")
	kinds := map[string]int{}
	for _, w := range c.Recording.Writes {
		o, err := Decode(c.Recording.Prefix, w)
		if err != nil {
			t.Fatal(err)
		}
		if o.Name == "" || !strings.HasSuffix(w.Key, "/"+o.Path()) {
			t.Errorf("rev %d %s: decoded as %+v", w.Rev, w.Key, o)
		}
		if o.Namespace == ns { // a real apiserver also renews its own Leases meanwhile
			kinds[o.Resource+" "+o.Kind+" "+o.Role]++
		}
	}
	want := map[string]int{"pods create ": 1, "pods delete ": 1, "pods binding kube-scheduler": 2,
		"pods create kube-controller-manager": 2, "events create kube-scheduler": 2}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("decoded %v, want %v", kinds, want)
			break
		}
	}
}

// A judge that cannot fail is a defect: the clean recording with one of
// m1's writes moved after m2's first write (its revision raised) must be
// judged late, by token and, with the tokens stripped, by master.
func TestJudgeCatchesALateCommitMovedIntoTheCleanRecording(t *testing.T) {
	for _, strip := range []bool{false, true} {
		c := loadCase(t, "clean")
		evs := events(t, c)
		if strip {
			evs = withoutTokens(evs)
		}
		rep := Judge(c.Recording, evs, Options{})
		if len(rep.Late) != 0 {
			t.Fatalf("tokens stripped %v: late before the mutation: %v", strip, rep.Late)
		}
		old, next := firstOf(t, rep, "m1", audit.Scheduler), firstOf(t, rep, "m2", audit.Scheduler)
		moveAfter(&c.Recording, old.Write.Rev, next.Write.Rev)
		rep = Judge(c.Recording, evs, Options{})
		if len(rep.Late) != 1 || rep.Late[0].Object.Name != old.Object.Name || rep.Late[0].Next.Object.Name != next.Object.Name {
			t.Errorf("tokens stripped %v: %s moved after %s: late %v", strip, old, next, rep.Late)
		}
	}
}

// The late recording judged by tokens (m1's requests token 1, m2's token
// 2, as the gate sends them) finds the same two late commits; moved back
// before m2's first write, they are not late.
func TestJudgeLateCommitsByTokenAndInOrder(t *testing.T) {
	c := loadCase(t, "late")
	evs := withTokens(events(t, c), map[string]string{"m1": "1", "m2": "2"})
	checkLate(t, Judge(c.Recording, evs, Options{}))
	rep := Judge(c.Recording, events(t, c), Options{})
	first := rep.Late[0].Next.Write.Rev
	for _, l := range rep.Late {
		first = min(first, l.Next.Write.Rev)
	}
	for i, l := range rep.Late {
		moveBefore(&c.Recording, l.Write.Rev, first, i)
	}
	if rep := Judge(c.Recording, events(t, c), Options{}); len(rep.Late) != 0 {
		t.Errorf("writes committed before the next term's first judged late: %v", rep.Late)
	}
}

// Without its accepted audit entry, a committed write is a ghost; the
// ghost answered 201 is none.
func TestJudgeGhostFollowsTheAuditEntry(t *testing.T) {
	c := loadCase(t, "clean")
	for i, l := range c.Audit["m1"] {
		if strings.Contains(l, `"subresource":"binding"`) {
			c.Audit["m1"] = append(c.Audit["m1"][:i:i], c.Audit["m1"][i+1:]...)
			break
		}
	}
	rep := judge(t, c)
	if len(rep.Ghosts) != 1 || rep.Ghosts[0].Object.Kind != Binding || rep.Ghosts[0].Request != nil {
		t.Fatalf("m1's binding without its audit entry: ghosts %v", rep.Ghosts)
	}
	if rep.Ghosts[0].Role != audit.Scheduler {
		t.Errorf("the binding's writer from the object: %q", rep.Ghosts[0].Role)
	}
	g := loadCase(t, "ghost")
	for i, l := range g.Audit["m1"] {
		g.Audit["m1"][i] = strings.Replace(l, `"code":504`, `"code":201`, 1)
	}
	if rep := judge(t, g); len(rep.Ghosts) != 0 {
		t.Errorf("the ghost answered 201: ghosts %v", rep.Ghosts)
	}
}

// A create made by an apply (PATCH) or an update that creates is the
// request's, not a ghost.
func TestJudgeCreateByApplyIsNoGhost(t *testing.T) {
	c := loadCase(t, "clean")
	rep := judge(t, c)
	var pod Commit
	for _, k := range rep.Commits {
		if k.Master == "m1" && k.Role == audit.ControllerManager {
			pod = k
		}
	}
	for i, l := range c.Audit["m1"] {
		if strings.Contains(l, `"verb":"create"`) && strings.Contains(l, `"resource":"pods","namespace"`) {
			l = strings.Replace(l, `"verb":"create"`, `"verb":"patch"`, 1)
			c.Audit["m1"][i] = strings.Replace(l, `"name":""`, `"name":"`+pod.Object.Name+`"`, 1)
		}
	}
	if rep := judge(t, c); len(rep.Ghosts) != 0 || len(rep.Commits) != 6 {
		t.Errorf("%s created by a patch: ghosts %v", pod.Object.Name, rep.Ghosts)
	}
}

// A value the judge cannot decode fails the judgement instead of passing
// as a history without late commits.
func TestJudgeUnreadableValueIsAProblem(t *testing.T) {
	c := loadCase(t, "late")
	c.Recording.Writes[len(c.Recording.Writes)-1].Value = []byte("k8s\x00garbage")
	if rep := judge(t, c); rep.OK() || len(rep.Problems) != 1 {
		t.Errorf("an undecodable write: ok %v, problems %v", rep.OK(), rep.Problems)
	}
}

func firstOf(t *testing.T, rep Report, master, role string) Commit {
	t.Helper()
	var out []Commit
	for _, c := range rep.Commits {
		if c.Master == master && c.Role == role {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s commit of %s in %v", role, master, rep.Commits)
	}
	if master == "m1" {
		return out[len(out)-1] // the old term's last
	}
	return out[0] // the new term's first
}

// moveAfter gives the write at rev a revision just after next's.
func moveAfter(r *Recording, rev, next int64) {
	for i := range r.Writes {
		if r.Writes[i].Rev == rev {
			r.Writes[i].Rev, r.Writes[i].CreateRev = next+1, fixCreate(r.Writes[i], next+1)
		} else if r.Writes[i].Rev > next {
			r.Writes[i].Rev, r.Writes[i].CreateRev = r.Writes[i].Rev+1, fixCreate(r.Writes[i], r.Writes[i].Rev+1)
		}
	}
}

// moveBefore gives the write at rev a revision before first (the i-th of
// those moved), as if etcd had committed it before the next term's write.
func moveBefore(r *Recording, rev, first int64, i int) {
	for k := range r.Writes {
		if r.Writes[k].Rev == rev {
			nr := first - 1 - int64(i) // below first, apart from the others moved
			r.Writes[k].Rev, r.Writes[k].CreateRev = nr, fixCreate(r.Writes[k], nr)
		}
	}
}

// fixCreate keeps a create a create at its new revision.
func fixCreate(w Write, rev int64) int64 {
	if w.CreateRev == w.Rev {
		return rev
	}
	return w.CreateRev
}

func withoutTokens(evs []audit.Event) []audit.Event {
	out := make([]audit.Event, len(evs))
	for i, e := range evs {
		e.Impersonator, e.Token = "", nil
		out[i] = e
	}
	return out
}

func withTokens(evs []audit.Event, tokens map[string]string) []audit.Event {
	out := make([]audit.Event, len(evs))
	for i, e := range evs {
		e.Impersonator, e.Token = "kha-supervisor", []string{tokens[e.Server]}
		out[i] = e
	}
	return out
}

// A delete is its request's writer's, never the deleted object's maker's:
// the prober deletes the ReplicaSet's pods, which name the controller-
// manager (seen on the real plane: the prober's deletes whose request the
// judge did not find listed as the controller-manager's ghost writes). A
// delete with no audit entry has no known writer; one the controller-
// manager sent (its answer lost: 504) is its ghost write.
func TestJudgeDeleteIsItsRequestsNotTheObjectsMakers(t *testing.T) {
	c := loadCase(t, "clean")
	pod := firstOf(t, judge(t, c), "m1", audit.ControllerManager)
	var made Write
	for _, w := range c.Recording.Writes {
		if w.Key == pod.Write.Key {
			made = w // its latest value (the binding's, if bound)
		}
	}
	c.Recording.ToRev++
	del := Write{Rev: c.Recording.ToRev, Key: made.Key, Delete: true, Prev: made.Value}
	c.Recording.Writes = append(c.Recording.Writes, del)
	rep := judge(t, c)
	for _, k := range rep.Commits {
		if k.Object.Kind == Delete {
			t.Errorf("a delete with no audit entry attributed: %s", k)
		}
	}
	if len(rep.Ghosts) != 0 {
		t.Errorf("ghosts %v, want none (the deleter is unknown)", rep.Ghosts)
	}
	// The controller-manager's delete, answered 504 after etcd committed.
	at := pod.Request.Completed.Add(time.Second).UTC().Format(time.RFC3339Nano)
	line := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"delete",` +
		`"user":{"username":"` + rscUser + `"},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"pods","namespace":"` + pod.Object.Namespace +
		`","name":"` + pod.Object.Name + `"},"responseStatus":{"code":504,"message":"context deadline exceeded"},` +
		`"requestReceivedTimestamp":"` + at + `","stageTimestamp":"` + at + `"}`
	c.Audit["m1"] = append(c.Audit["m1"], line)
	rep = judge(t, c)
	if len(rep.Ghosts) != 1 || rep.Ghosts[0].Object.Kind != Delete || rep.Ghosts[0].Role != audit.ControllerManager || rep.Ghosts[0].Master != "m1" {
		t.Errorf("the controller-manager's delete answered 504: ghosts %v", rep.Ghosts)
	}
}

// The rack cut of TestKubeSmoke on the real plane (2 December, kha-fast,
// m1 cut at 13:42:15, m2's controller-manager's first write at revision
// 2451), trimmed to the ReplicaSet, Node and default-namespace event keys
// and their audit lines (request bodies dropped). Paired by object, verb
// and time, m2's ReplicaSet status updates after the takeover went to m1's
// updates accepted before the recording began (answered with revisions
// 1518-1938, below its first, 1973), and the node agents' Node patches to
// m1's controller-manager's: 10 late commits that were none. Paired by the
// revision each accepted answer carries, each is m2's or the node agents'
// (no managed component's), and nothing is late.
func TestJudgeRackCutPairsUpdatesByRevision(t *testing.T) {
	c := loadCase(t, "rackcut")
	rep := judge(t, c)
	if len(rep.Late) != 0 || !rep.OK() {
		t.Errorf("late commits %d, want none: %v", len(rep.Late), rep.Late)
	}
	rs := 0
	for _, k := range rep.Commits {
		if k.Object.Resource == "replicasets" && k.Object.Kind == Update {
			rs++
		}
		// Every managed write after the cut is m2's (its node lifecycle
		// controller patches the cut worker w1), paired by its revision (a
		// binding is answered with a Status: by its object).
		if k.Request == nil || k.Master != "m2" || k.Request.RV != k.Write.Rev && k.Object.Kind != Binding {
			t.Errorf("%s: want m2's write answered with its revision", k)
		}
	}
	if rs != 6 {
		t.Errorf("ReplicaSet status updates %d, want 6", rs)
	}
	if len(rep.Ghosts) != 0 {
		t.Errorf("ghosts %v", rep.Ghosts)
	}
}

// The prober's deletes of three ReplicaSet pods in the same rack cut (grace
// period 0, through m2): each is two writes of one request, the update
// that sets deletionTimestamp and the delete. The delete is the request's
// too (it was left without one and, named by the pod's maker, listed as
// the controller-manager's ghost write).
func TestJudgeRackCutDeleteIsTheDeletersTwoWrites(t *testing.T) {
	c := loadCase(t, "rackcut")
	all := matched(t, c)
	deletes := 0
	for i, k := range all {
		if k.Object.Kind != Delete {
			continue
		}
		deletes++
		if r := k.Request; r == nil || r.Verb != "delete" || r.User != "admin" || r.Server != "m2" {
			t.Errorf("%s: want the prober's delete", k)
		} else if p := all[i-1]; p.Write.Key != k.Write.Key || p.Request != k.Request {
			t.Errorf("%s: its update %s is another request's", k, p)
		}
	}
	if deletes != 3 {
		t.Errorf("deletes %d, want 3", deletes)
	}
	if rep := judge(t, c); len(rep.Ghosts) != 0 {
		t.Errorf("ghosts %v", rep.Ghosts)
	}
}

// The same rack cut had m1's last ReplicaSet status update been left
// unanswered (504: its frames queued on the cut connection) and committed
// at revision 3078 instead of m2's: a late commit of m1's term, after
// m2's first write (2451), which the judge must catch.
func TestJudgeRackCutCatchesAQueuedUpdate(t *testing.T) {
	c := loadCase(t, "rackcut")
	answered := func(l string) string { // the answer's resourceVersion
		var e struct {
			Ref struct{ Subresource string } `json:"objectRef"`
			Obj struct {
				Metadata struct{ ResourceVersion string }
			} `json:"responseObject"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatal(err)
		}
		return e.Ref.Subresource + " " + e.Obj.Metadata.ResourceVersion
	}
	m1, m2 := slices.IndexFunc(c.Audit["m1"], func(l string) bool { return answered(l) == "status 1938" }),
		slices.IndexFunc(c.Audit["m2"], func(l string) bool { return answered(l) == "status 3078" })
	if m1 < 0 || m2 < 0 {
		t.Fatalf("audit lines not found: m1 %d, m2 %d", m1, m2)
	}
	var e map[string]any
	if err := json.Unmarshal([]byte(c.Audit["m1"][m1]), &e); err != nil {
		t.Fatal(err)
	}
	delete(e, "responseObject")
	e["responseStatus"] = map[string]any{"code": 504, "message": "context deadline exceeded"}
	b, _ := json.Marshal(e)
	c.Audit["m1"][m1] = string(b)
	c.Audit["m2"] = append(c.Audit["m2"][:m2:m2], c.Audit["m2"][m2+1:]...)
	rep := judge(t, c)
	if len(rep.Late) != 1 || rep.Late[0].Write.Rev != 3078 || rep.Late[0].Master != "m1" || rep.Late[0].Next.Write.Rev != 2451 || rep.OK() {
		t.Errorf("late %v, want m1's update at 3078 after m2's first write at 2451", rep.Late)
	}
}

// A namespace deleted in every trial (the drill's, scenario 56) has a
// deletecollection per trial. The pods of this trial's namespace were
// deleted by this trial's request, not by the previous trial's, received
// before they existed: paired with that one, 104 of the new leader's
// deletes were judged late commits of the old term (2 December, 20:36).
func TestJudgeDeleteCollectionOfTheObjectsTime(t *testing.T) {
	created := time.Date(2026, 12, 2, 20, 36, 50, 0, time.UTC)
	coll := func(at time.Time, code int) audit.Event {
		return audit.Event{Verb: "deletecollection", Resource: "pods", Namespace: "kha-drill", Code: code,
			Received: at, Completed: at.Add(50 * time.Millisecond), Server: "m1"}
	}
	evs := []audit.Event{
		coll(created.Add(-10*time.Minute), 200), // the previous trial's
		coll(created.Add(20*time.Second), 504),
		coll(created.Add(30*time.Second), 200), // this trial's
	}
	for _, kind := range []string{Delete, Update} {
		commits := []Commit{{Write: Write{Rev: 10, Key: "/registry/pods/kha-drill/p"},
			Object: Object{Resource: "pods", Namespace: "kha-drill", Name: "p", Kind: kind, Created: created}}}
		match(commits, evs)
		if r := commits[0].Request; r == nil || !r.Received.Equal(evs[2].Received) {
			t.Errorf("%s: paired with %+v, want this trial's accepted deletecollection", kind, r)
		}
	}
}

// Scenario 65 with etcd_fence (3 December, 10:01): m1's apiserver, frozen
// with its master, had committed a scheduler write just before the freeze
// and answered it, and audited it, only at the thaw, 12 s later, in the
// middle of m2's bindings. By its answer the audit judge saw both masters
// writing at once; at the resource the write came before m2's first. A
// write committed is timed at its request's arrival; one that arrived
// early and committed late stays the late commits' to catch.
func TestOverlapTimesCommittedWritesAtTheirArrival(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 1, 5, 0, time.UTC)
	write := func(master string, received, completed time.Duration) audit.Event {
		return audit.Event{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "kha-probe", Code: 201,
			User: "system:kube-scheduler", Server: master, Received: t0.Add(received), Completed: t0.Add(completed)}
	}
	evs := []audit.Event{write("m1", -time.Second, -time.Second+5*time.Millisecond), write("m1", 0, 12*time.Second)}
	for d := 7 * time.Second; d <= 14*time.Second; d += 200 * time.Millisecond {
		evs = append(evs, write("m2", d, d+5*time.Millisecond))
	}
	o := Options{From: t0.Add(-time.Minute), To: t0.Add(time.Minute)}
	// Unpaired (no etcd case of the write): timed at its answer, as the
	// audit judge alone does.
	if over, _ := resourceOverlaps(nil, evs, o); len(over) != 1 {
		t.Fatalf("without the commit: %d overlaps, want the audit log's 1", len(over))
	}
	all := []Commit{{Write: Write{Rev: 100}, Request: &evs[1]}}
	over, auditOnly := resourceOverlaps(all, evs, o)
	if len(over) != 0 || len(auditOnly) != 1 {
		t.Fatalf("with the commit: overlaps %v, audit-only %v; want none at the resource and the audit log's one", over, auditOnly)
	}
	// A write of m1 that arrived after m2 began is an overlap however it
	// is timed.
	evs = append(evs, write("m1", 9*time.Second, 9*time.Second+5*time.Millisecond))
	all = []Commit{{Write: Write{Rev: 100}, Request: &evs[1]}, {Write: Write{Rev: 200}, Request: &evs[len(evs)-1]}}
	if over, _ := resourceOverlaps(all, evs, o); len(over) != 1 {
		t.Fatalf("m1 writing after m2 began: %d overlaps, want 1", len(over))
	}
}

// Terms A, B, A without tokens (mode off): B's write that arrived before A
// wrote again and committed after A's write is late, though B's first
// write came after A's first (issue 22 review: the order by first arrival
// never checked B against A's second term).
func TestLateCommitAcrossASecondTermOfTheFirstMaster(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	write := func(master string, rev int64, received time.Duration) Commit {
		e := audit.Event{Verb: "create", Resource: "events", Namespace: "kha-probe", Code: 201, User: "system:kube-scheduler",
			Server: master, Received: t0.Add(received), Completed: t0.Add(received + 5*time.Millisecond)}
		return Commit{Write: Write{Rev: rev}, Role: audit.Scheduler, Master: master, Request: &e}
	}
	cs := []Commit{
		write("m1", 1, 0),
		write("m2", 2, time.Second),
		write("m2", 5, 2*time.Second), // in flight across m1's second term
		write("m1", 4, 3*time.Second),
	}
	got := late(cs, audit.Scheduler)
	if len(got) != 1 || got[0].Write.Rev != 5 || got[0].Next.Write.Rev != 4 {
		t.Fatalf("late = %v, want m2's rev 5 after m1's rev 4", got)
	}
	// The same without the straggler: nothing is late.
	if got := late([]Commit{cs[0], cs[1], cs[3]}, audit.Scheduler); len(got) != 0 {
		t.Fatalf("late = %v, want none", got)
	}
}

// The first of a graceful delete's two writes (deletionTimestamp set) is a
// delete request's, never an update's: the apiserver sets deletionTimestamp
// only when it serves a delete. In scenario 69 (3 December 13:36, kha-fast-
// kill) the prober's delete of a pod m2 had bound was paired whole with the
// final delete, and its first write with m1's scheduler's status update of
// the same pod answered 504 five seconds before: a late commit of m1's term
// that was the prober's. Here the same: m1's scheduler's update of each
// deleted pod, answered 504 a second before the prober's delete.
func TestJudgeGracefulDeletesFirstWriteIsTheDeletes(t *testing.T) {
	c := loadCase(t, "rackcut")
	all := matched(t, c)
	added := 0
	for _, k := range all {
		if k.Object.Kind != Delete || k.Request == nil {
			continue
		}
		at := k.Request.Received.Add(-time.Second).UTC().Format(time.RFC3339Nano)
		line := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"update",` +
			`"user":{"username":"` + schedUser + `"},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"pods","namespace":"` + k.Object.Namespace +
			`","name":"` + k.Object.Name + `","subresource":"status"},"responseStatus":{"code":504,"message":"context canceled"},` +
			`"requestReceivedTimestamp":"` + at + `","stageTimestamp":"` + at + `"}`
		c.Audit["m1"] = append(c.Audit["m1"], line)
		added++
	}
	if added == 0 {
		t.Fatal("set-up: no paired delete in the case")
	}
	rep := judge(t, c)
	if len(rep.Late) != 0 {
		t.Errorf("late commits %v, want none: the deletes are the prober's", rep.Late)
	}
	for _, k := range rep.Commits {
		if k.Object.Kind == Deleting && (k.Request == nil || k.Request.Verb != "delete") {
			t.Errorf("%s: want its delete request", k)
		}
	}
}

// matched is the case's writes, decoded and paired with its requests.
func matched(t *testing.T, c Case) []Commit {
	t.Helper()
	var all []Commit
	for _, w := range c.Recording.Writes {
		o, err := Decode(c.Recording.Prefix, w)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, Commit{Write: w, Object: o})
	}
	match(all, events(t, c))
	return all
}

// A request answered before the key's previous write was made cannot have
// made the next one: the apiserver writes an existing key under a compare
// of its mod revision with the one it read. In a le-tuned trial of 44 (3
// December, night) a write of m1's kube-scheduler's Lease was paired with
// a 504 of that Lease answered fifty minutes before the trial and judged
// a late commit. Here: m2's second ReplicaSet status update in the rack
// cut loses its audit entry, and m1's replicaset controller's update of
// the same ReplicaSet answered 504 before its first one arrived is added; the
// write must stay unpaired (a ghost), not become m1's late commit.
func TestJudgeNoRequestAnsweredBeforeTheKeysEarlierWrite(t *testing.T) {
	c := loadCase(t, "rackcut")
	var k *Commit
	prev := map[string]Commit{}
	for _, x := range matched(t, c) {
		if x.Object.Resource == "replicasets" && x.Object.Kind == Update && x.Request != nil && x.Request.RV == x.Write.Rev {
			if _, ok := prev[x.Write.Key]; ok {
				k = &x
				break
			}
			prev[x.Write.Key] = x
		}
	}
	if k == nil {
		t.Fatal("set-up: no second ReplicaSet status update paired by revision in the case")
	}
	dropped := 0
	for m, lines := range c.Audit {
		c.Audit[m] = slices.DeleteFunc(slices.Clone(lines), func(l string) bool {
			evs, err := audit.Parse(strings.NewReader(l+"\n"), m)
			gone := err == nil && len(evs) == 1 && evs[0].RV == k.Write.Rev && evs[0].Name == k.Object.Name
			if gone {
				dropped++
			}
			return gone
		})
	}
	if dropped != 1 {
		t.Fatalf("set-up: dropped %d audit lines of rev %d, want 1", dropped, k.Write.Rev)
	}
	// Answered just before the key's previous write arrived (fifty
	// minutes in the trial of 44; here the ReplicaSet is younger).
	before := prev[k.Write.Key].Request.Received.Add(-100 * time.Millisecond)
	if before.Before(k.Object.Created) {
		t.Fatalf("set-up: %s arrived within 100 ms of the ReplicaSet's creation", prev[k.Write.Key])
	}
	at := before.UTC().Format(time.RFC3339Nano)
	c.Audit["m1"] = append(c.Audit["m1"], `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"update",`+
		`"user":{"username":"`+rscUser+`"},"sourceIPs":["10.77.1.11"],"objectRef":{"resource":"replicasets","namespace":"`+k.Object.Namespace+
		`","name":"`+k.Object.Name+`","apiGroup":"apps","subresource":"status"},"responseStatus":{"code":504,"message":"Timeout: request did not complete within requested timeout - context deadline exceeded"},`+
		`"requestReceivedTimestamp":"`+at+`","stageTimestamp":"`+at+`"}`)
	rep := judge(t, c)
	if len(rep.Late) != 0 {
		t.Errorf("late commits %v, want none", rep.Late)
	}
	for _, x := range rep.Commits {
		if x.Write.Rev == k.Write.Rev && x.Request != nil {
			t.Errorf("%s: paired with a request answered before the key's previous write", x)
		}
	}
}

// The same floor when the key's earlier write lies before the recording
// (Write.PrevRev): the request answered with that revision arrived after
// the 504 was answered, so the 504 cannot have made the key's next write.
// In the le-tuned trials of 76 (5 December) two Lease writes were judged
// late commits of a 504 answered in an earlier trial. Here the rack cut's
// second ReplicaSet status update becomes its key's first write in the
// recording, loses its audit entry, and a 504 of m1 answered just before
// the first one arrived is added: unpaired with PrevRev, paired without it
// (the defect, kept as this test's check that it exercises the case).
func TestJudgeNoRequestAnsweredBeforeTheKeysWriteBeforeTheRecording(t *testing.T) {
	c := loadCase(t, "rackcut")
	var k, prev Commit
	seen := map[string]Commit{}
	for _, x := range matched(t, c) {
		if x.Object.Resource == "replicasets" && x.Object.Kind == Update && x.Request != nil && x.Request.RV == x.Write.Rev {
			if p, ok := seen[x.Write.Key]; ok {
				k, prev = x, p
				break
			}
			seen[x.Write.Key] = x
		}
	}
	if k.Request == nil {
		t.Fatal("set-up: no second ReplicaSet status update paired by revision in the case")
	}
	c.Recording.Writes = slices.DeleteFunc(slices.Clone(c.Recording.Writes), func(w Write) bool {
		return w.Key == k.Write.Key && w.Rev < k.Write.Rev
	})
	for m, lines := range c.Audit {
		c.Audit[m] = slices.DeleteFunc(slices.Clone(lines), func(l string) bool {
			evs, err := audit.Parse(strings.NewReader(l+"\n"), m)
			return err == nil && len(evs) == 1 && evs[0].RV == k.Write.Rev && evs[0].Name == k.Object.Name
		})
	}
	at := prev.Request.Received.Add(-100 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	c.Audit["m1"] = append(c.Audit["m1"], `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"update",`+
		`"user":{"username":"`+rscUser+`"},"sourceIPs":["10.77.1.11"],"objectRef":{"resource":"replicasets","namespace":"`+k.Object.Namespace+
		`","name":"`+k.Object.Name+`","apiGroup":"apps","subresource":"status"},"responseStatus":{"code":504,"message":"Timeout: request did not complete within requested timeout - context deadline exceeded"},`+
		`"requestReceivedTimestamp":"`+at+`","stageTimestamp":"`+at+`"}`)
	pairedWith504 := func(prevRev int64) bool {
		for i := range c.Recording.Writes {
			if c.Recording.Writes[i].Rev == k.Write.Rev {
				c.Recording.Writes[i].PrevRev = prevRev
			}
		}
		for _, x := range judge(t, c).Commits {
			if x.Write.Rev == k.Write.Rev {
				return x.Request != nil && x.Request.Code == 504
			}
		}
		t.Fatalf("rev %d not in the report", k.Write.Rev)
		return false
	}
	if !pairedWith504(0) {
		t.Fatal("set-up: without the earlier write's revision the write is not paired with the 504; the case no longer exercises the floor")
	}
	if pairedWith504(prev.Write.Rev) {
		t.Errorf("rev %d paired with a 504 answered before the request that made the key's previous write (rev %d) arrived", k.Write.Rev, prev.Write.Rev)
	}
}
