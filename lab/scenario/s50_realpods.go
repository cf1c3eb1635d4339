package scenario

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/agent"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// Scenario 50 (real plane): the operators' pod questions. The active
// master's rack (master and worker) is cut from the etcd rack and the
// other rack, as in scenario 40, with workloads in place: a Deployment of
// two pods spread over the workers (P1 on the cut worker, P2 on the other)
// and a StatefulSet of one pod on the cut worker. The fault lasts until
// P1's replacement runs on the other worker (eviction needs the node
// lifecycle controller's grace period, then the pods' toleration); after
// the heal the scenario waits for the cut worker's agent to stop P1 and
// for the StatefulSet's pod to run again, then writes the timeline.
//
// Toleration: the pods carry tolerationSeconds 20 for the unreachable and
// not-ready NoExecute taints. Without it the DefaultTolerationSeconds
// admission plugin gives every pod 300 s (kube-apiserver's
// --default-unreachable-toleration-seconds): the facts give the eviction
// time that would have been.
func init() {
	s := &podsTrial{}
	registerReal(plane.Spec{ID: 50, Name: "real: pods when the active's rack is cut off",
		Fault:   "the active master's rack (master, worker) cut from the etcd rack and the other rack, with a Deployment and a StatefulSet on the workers",
		Prepare: s.prepare, Inject: s.inject, Hold: s.hold, After: s.after})
}

const (
	podsNS           = "kha-pods"
	s50webName       = "web"
	s50dbName        = "db"
	s50dbPod         = "db-0"
	s50tolerationSec = 20
	s50defaultTolSec = 300 // DefaultTolerationSeconds' default
	s50holdTimeout   = 4 * time.Minute
	s50afterTimeout  = 2 * time.Minute
	s50bothAtLeast   = 5 * time.Second // the fault lasts this long after the replacement runs
)

// podsTrial is one trial's state (trials run one at a time).
type podsTrial struct {
	cutRack, cutW, otherW string
	p1, p2, db            agent.Running
	taints                map[string]time.Time // "key:effect" -> first seen by the poll
	noExecuteAdded        time.Time            // the unreachable NoExecute taint's TimeAdded (1 s precision)
	load                  string               // the host's load averages at the fault
	uncut                 string               // the master whose apiserver the fault leaves reachable
	fault                 time.Time
}

func (s *podsTrial) prepare(ctx context.Context, t *plane.Trial) error {
	*s = podsTrial{taints: map[string]time.Time{}}
	for _, w := range plane.Workers {
		if w.Near == t.Leader {
			s.cutRack, s.cutW = w.Rack, w.Name
		} else {
			s.otherW, s.uncut = w.Name, w.Near
		}
	}
	r := t.R
	if err := r.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podsNS}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("namespace %s: %w", podsNS, err)
	}
	if err := s.clean(ctx, r); err != nil {
		return err
	}
	if err := r.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error { return s.create(ctx, c) }); err != nil {
		return fmt.Errorf("workloads: %w", err)
	}
	return s.waitPlaced(ctx, r)
}

// clean removes the previous trial's workloads and waits for their pods
// to go (the agents acknowledge the graceful deletions).
func (s *podsTrial) clean(ctx context.Context, r *plane.Runner) error {
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	err := r.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error {
		err := c.AppsV1().Deployments(podsNS).Delete(ctx, s50webName, opts)
		if err == nil || apierrors.IsNotFound(err) {
			err = c.AppsV1().StatefulSets(podsNS).Delete(ctx, s50dbName, opts)
		}
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pods, err := s.pods(ctx, r)
		if err == nil && len(pods) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("clean up: %d pods of the previous trial left in %s after 2m (err %v)", len(pods), podsNS, err)
		}
		time.Sleep(time.Second)
	}
}

func (s *podsTrial) pods(ctx context.Context, r *plane.Runner) ([]corev1.Pod, error) {
	var out []corev1.Pod
	err := r.Any(ctx, func(ctx context.Context, c kubernetes.Interface) error {
		l, err := c.CoreV1().Pods(podsNS).List(ctx, metav1.ListOptions{})
		if err == nil {
			out = l.Items
		}
		return err
	})
	return out, err
}

func podsTolerations() []corev1.Toleration {
	sec := int64(s50tolerationSec)
	var out []corev1.Toleration
	for _, k := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		out = append(out, corev1.Toleration{Key: k, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &sec})
	}
	return out
}

func podsTemplate(app string, spec corev1.PodSpec) corev1.PodTemplateSpec {
	spec.Containers = []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}
	spec.Tolerations = podsTolerations()
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: spec}
}

// create: the Deployment spread one pod per worker (DoNotSchedule, and
// tainted nodes left out of the spread, so that the replacement may go to
// the other worker), the StatefulSet preferring the cut worker (not
// requiring it: its successor could go anywhere).
func (s *podsTrial) create(ctx context.Context, c kubernetes.Interface) error {
	two, one := int32(2), int32(1)
	honor := corev1.NodeInclusionPolicyHonor
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: s50webName},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s50webName}},
			Template: podsTemplate(s50webName, corev1.PodSpec{TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s50webName}}, NodeTaintsPolicy: &honor}}})}}
	if _, err := c.AppsV1().Deployments(podsNS).Create(ctx, web, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	prefer := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{s.cutW}}}}}}}}
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: s50dbName},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, ServiceName: s50dbName, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": s50dbName}},
			Template: podsTemplate(s50dbName, corev1.PodSpec{Affinity: prefer})}}
	if _, err := c.AppsV1().StatefulSets(podsNS).Create(ctx, db, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

func podReady(p corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitPlaced waits for P1 on the cut worker, P2 on the other and db-0 on
// the cut worker, all Running and Ready (the agents' report).
func (s *podsTrial) waitPlaced(ctx context.Context, r *plane.Runner) error {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		pods, err := s.pods(ctx, r)
		last = fmt.Sprint(err)
		if err == nil {
			if err = s.placed(pods); err == nil {
				return nil
			}
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("workloads not in place after 2m: %s", last)
}

func (s *podsTrial) placed(pods []corev1.Pod) error {
	s.p1, s.p2, s.db = agent.Running{}, agent.Running{}, agent.Running{}
	var where []string
	for _, p := range pods {
		where = append(where, fmt.Sprintf("%s on %q ready %v", p.Name, p.Spec.NodeName, podReady(p)))
		if !podReady(p) {
			continue
		}
		run := agent.Running{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
		switch {
		case p.Name == s50dbPod && p.Spec.NodeName == s.cutW:
			s.db = run
		case p.Labels["app"] == s50webName && p.Spec.NodeName == s.cutW:
			s.p1 = run
		case p.Labels["app"] == s50webName && p.Spec.NodeName == s.otherW:
			s.p2 = run
		}
	}
	if s.p1.UID == "" || s.p2.UID == "" || s.db.UID == "" || len(pods) != 3 {
		return fmt.Errorf("want web pods ready on %s and %s and %s ready on %s: %s", s.cutW, s.otherW, s50dbPod, s.cutW, strings.Join(where, ", "))
	}
	return nil
}

// inject cuts the rack as scenario 40 does.
func (s *podsTrial) inject(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
	s.fault = time.Now()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	topo := t.R.P.Lab.Topo
	other := map[string]string{"r1": "r2", "r2": "r1"}[s.cutRack]
	a := topo.InRack(s.cutRack)
	b := slices.Concat(topo.InRack("etcd"), topo.InRack(other))
	heal := func(ctx context.Context) error { return topo.Heal(ctx, a, b) }
	return heal, topo.Cut(ctx, a, b)
}

func (s *podsTrial) logs(r *plane.Runner) (cut, other []agent.Record, err error) {
	cut, err = agent.ReadPodLog(r.P.PodLog(s.cutW))
	if err == nil {
		other, err = agent.ReadPodLog(r.P.PodLog(s.otherW))
	}
	return cut, other, err
}

// replacement is P1's successor's start on the other worker.
func (s *podsTrial) replacement(other []agent.Record) (agent.Record, bool) {
	for _, rec := range other {
		if rec.Event == agent.EventStart && rec.At.After(s.fault) && strings.HasPrefix(rec.Name, s50webName+"-") &&
			rec.UID != s.p1.UID && rec.UID != s.p2.UID {
			return rec, true
		}
	}
	return agent.Record{}, false
}

func podsStopped(recs []agent.Record, uid types.UID) (agent.Record, bool) {
	for _, rec := range recs {
		if rec.Event == agent.EventStop && rec.UID == uid {
			return rec, true
		}
	}
	return agent.Record{}, false
}

// hold keeps the rack cut until P1's replacement has run on the other
// worker for s50bothAtLeast, polling the cut node's taints meanwhile.
func (s *podsTrial) hold(ctx context.Context, t *plane.Trial) error {
	deadline := time.Now().Add(s50holdTimeout)
	var seen time.Time
	for time.Now().Before(deadline) && ctx.Err() == nil {
		s.pollTaints(ctx, t.R)
		_, other, err := s.logs(t.R)
		if err != nil {
			return err
		}
		if _, ok := s.replacement(other); ok && seen.IsZero() {
			seen = time.Now()
		}
		if !seen.IsZero() && time.Since(seen) >= s50bothAtLeast {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("P1's replacement did not run on %s within %s of the fault", s.otherW, s50holdTimeout)
}

func (s *podsTrial) pollTaints(ctx context.Context, r *plane.Runner) {
	_ = r.AnyFrom(ctx, s.uncut, func(ctx context.Context, c kubernetes.Interface) error {
		n, err := c.CoreV1().Nodes().Get(ctx, s.cutW, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, tn := range n.Spec.Taints {
			k := tn.Key + ":" + string(tn.Effect)
			if tn.Key == corev1.TaintNodeUnreachable && tn.Effect == corev1.TaintEffectNoExecute && tn.TimeAdded != nil && s.noExecuteAdded.IsZero() {
				s.noExecuteAdded = tn.TimeAdded.Time
			}
			if _, ok := s.taints[k]; !ok {
				s.taints[k] = time.Now()
			}
		}
		return nil
	})
}

// after waits for the cut worker's agent to stop P1 and for db-0 to run
// again, then writes the timeline and the facts.
func (s *podsTrial) after(ctx context.Context, t *plane.Trial, res *report.Result) {
	fail := func(f string, a ...any) { res.Problems = append(res.Problems, fmt.Sprintf(f, a...)) }
	deadline := time.Now().Add(s50afterTimeout)
	var cut, other []agent.Record
	for {
		var err error
		if cut, other, err = s.logs(t.R); err != nil {
			fail("%v", err)
			return
		}
		_, p1Stopped := podsStopped(cut, s.p1.UID)
		_, dbAgain := s.dbSuccessor(cut, other)
		if p1Stopped && dbAgain {
			break
		}
		if time.Now().After(deadline) {
			fail("within %s of the heal: P1 stopped on %s %v, %s running again %v", s50afterTimeout, s.cutW, p1Stopped, s50dbPod, dbAgain)
			break
		}
		time.Sleep(time.Second)
	}
	evs, err := audit.ReadFiles(t.R.P.AuditLogs())
	if err != nil {
		fail("%v", err)
		return
	}
	tl := &podsTimeline{s: s, t: t, res: res, evs: evs, cut: cut, other: other, opts: audit.Options{Masters: t.R.P.MasterIPs()}}
	tl.build(ctx)
	res.Timeline = tl.marks
	slices.SortFunc(res.Timeline, func(a, b plane.Mark) int { return a.At.Compare(b.At) })
	res.Facts = append(res.Facts, tl.facts...)
	res.Problems = append(res.Problems, tl.problems...)
}

func (s *podsTrial) dbSuccessor(logs ...[]agent.Record) (agent.Record, bool) {
	for _, recs := range logs {
		for _, rec := range recs {
			if rec.Event == agent.EventStart && rec.Name == s50dbPod && rec.UID != s.db.UID && rec.At.After(s.fault) {
				return rec, true
			}
		}
	}
	return agent.Record{}, false
}

// podsTimeline assembles one trial's marks from the audit logs (what the
// apiservers accepted, exact), the agents' pod logs (what the nodes ran),
// the supervisors' journals and the units' start times.
type podsTimeline struct {
	s          *podsTrial
	t          *plane.Trial
	res        *report.Result
	evs        []audit.Event
	cut, other []agent.Record
	opts       audit.Options
	marks      []plane.Mark
	facts      []string
	problems   []string
}

func (tl *podsTimeline) mark(key string, at time.Time, owner, source, what string, a ...any) {
	if at.IsZero() {
		return
	}
	tl.marks = append(tl.marks, plane.Mark{Key: key, At: at, Label: fmt.Sprintf(what, a...), Owner: owner, Source: source})
}

func (tl *podsTimeline) fact(f string, a ...any) { tl.facts = append(tl.facts, fmt.Sprintf(f, a...)) }
func (tl *podsTimeline) problem(f string, a ...any) {
	tl.problems = append(tl.problems, fmt.Sprintf(f, a...))
}
func (tl *podsTimeline) rel(at time.Time) string {
	return fmt.Sprintf("%+.2f s", at.Sub(tl.res.FaultAt).Seconds())
}

// first is the first accepted write after the fault matching pred.
func (tl *podsTimeline) first(after time.Time, pred func(audit.Event) bool) (audit.Event, bool) {
	for _, e := range tl.evs {
		if e.Completed.After(after) && e.Write() && e.Accepted() && pred(e) {
			return e, true
		}
	}
	return audit.Event{}, false
}

func (tl *podsTimeline) build(ctx context.Context) {
	s, res := tl.s, tl.res
	old, nw := tl.t.Leader, podsOtherMaster(tl.t.Leader)
	tl.mark("fault", res.FaultAt, plane.OwnerLab, "lab: the cut's first route",
		"%s's rack %s (%s, %s) cut from the etcd rack and the other rack", old, s.cutRack, old, s.cutW)
	tl.kha(ctx, old, nw)
	tl.components(nw)
	tl.node()
	tl.evictions()
	tl.replacement()
	tl.mark("heal", res.HealAt, plane.OwnerLab, "lab: the heal's first route", "the cut healed")
	tl.afterHeal()
	tl.untouched()
	tl.facts = append(tl.facts, fmt.Sprintf("roles in this trial: M1 = %s (active, rack %s cut off), W1 = %s, M2 = %s, W2 = %s", old, s.cutRack, s.cutW, nw, s.otherW))
	tl.fact("host load averages at the fault (1, 5, 15 min, 2 cores): %s", s.load)
}

func podsOtherMaster(m string) string {
	if m == lab.MasterNames[0] {
		return lab.MasterNames[1]
	}
	return lab.MasterNames[0]
}

// kha: the old active's fence and the new one's election, from the
// supervisors' journals; the units' starts from systemd.
func (tl *podsTimeline) kha(ctx context.Context, old, nw string) {
	r, from := tl.t.R, tl.res.FaultAt
	if j, err := r.Journal(ctx, old, lab.SupervisorUnit, from); err == nil {
		tl.mark("fence", podsJournalAt(j, "FENCING"), plane.OwnerKha, "journal of "+old,
			"%s's kha-supervisor fences: its lease can no longer be proven (renewals fail)", old)
		tl.mark("fenced", podsJournalAt(j, "fenced: units"), plane.OwnerKha, "journal of "+old,
			"%s's kube-scheduler and kube-controller-manager stopped by its fence", old)
	} else {
		tl.problem("journal of %s: %v", old, err)
	}
	if j, err := r.Journal(ctx, nw, lab.SupervisorUnit, from); err == nil {
		tl.mark("promoting", podsJournalAt(j, "transition", "to=promoting"), plane.OwnerKha, "journal of "+nw,
			"%s wins the election: %s's election key expired in etcd (lease TTL %s)", nw, old, tl.t.Mode.Profile.TTL)
		tl.mark("active", podsJournalAt(j, "transition", "to=active"), plane.OwnerKha, "journal of "+nw,
			"%s active: its units started", nw)
	} else {
		tl.problem("journal of %s: %v", nw, err)
	}
	for _, u := range []string{kube.ControllerManager, kube.Scheduler} {
		if st, err := r.UnitStart(ctx, nw, u+".service"); err == nil && st.After(from) {
			tl.mark("start-"+u, st, plane.OwnerKha, "systemd ExecMainStartTimestamp on "+nw, "%s's %s started (by its supervisor)", nw, u)
		}
	}
}

func podsJournalAt(j []plane.JournalLine, subs ...string) time.Time {
	for _, l := range j {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l.Message, s)
		}
		if all {
			return l.At
		}
	}
	return time.Time{}
}

func (tl *podsTimeline) components(nw string) {
	for _, role := range []string{audit.Scheduler, audit.ControllerManager} {
		if e, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool { return e.Role() == role && tl.opts.Master(e) == nw }); ok {
			tl.mark("first-"+role, e.Completed, plane.OwnerKube, "audit log of "+e.Server,
				"%s's %s's first accepted write: %s %s (as %s)", nw, role, e.Verb, e.Object(), e.User)
		}
	}
}

func (tl *podsTimeline) byController(e audit.Event) bool { return e.Role() == audit.ControllerManager }

// node: the cut worker as the nodes and the node lifecycle controller saw it.
func (tl *podsTimeline) node() {
	s := tl.s
	for _, rec := range tl.cut {
		if rec.Event == agent.EventLost && rec.At.After(tl.res.FaultAt) {
			tl.mark("lost", rec.At, plane.OwnerKube, "pod log of "+s.cutW+"'s agent",
				"%s's agent (as a kubelet) reaches no apiserver: keeps its %d pods running", s.cutW, rec.Pods)
			break
		}
	}
	if e, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool {
		return tl.byController(e) && e.Resource == "nodes" && e.Subresource == "status" && e.Name == s.cutW
	}); ok {
		tl.mark("notready", e.Completed, plane.OwnerKube, "audit log of "+e.Server,
			"node lifecycle controller marks %s NotReady (Ready Unknown): no heartbeat for --node-monitor-grace-period (50 s) plus up to --node-monitor-period (5 s), counted from when this controller-manager first saw the node, not from the node's last heartbeat", s.cutW)
	}
	for _, k := range []string{corev1.TaintNodeUnreachable + ":NoSchedule", corev1.TaintNodeUnreachable + ":NoExecute"} {
		tl.mark("taint-"+k, s.taints[k], plane.OwnerKube, "poll of Node "+s.cutW+" every 0.5 s", "taint %s on %s", k, s.cutW)
	}
	tl.mark("taint-added", s.noExecuteAdded, plane.OwnerKube, "the taint's timeAdded (1 s precision)",
		"the NoExecute taint's timeAdded: the pods' %d s toleration counts from here", s50tolerationSec)
	if e, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool {
		return tl.byController(e) && e.Resource == "pods" && e.Subresource == "status" && e.Name == s.p1.Name
	}); ok {
		tl.mark("p1-notready", e.Completed, plane.OwnerKube, "audit log of "+e.Server, "P1 (%s) marked not Ready by the node lifecycle controller: out of the Service endpoints", s.p1.Name)
	}
}

func (tl *podsTimeline) deleted(name string, by func(audit.Event) bool, after time.Time) (audit.Event, bool) {
	return tl.first(after, func(e audit.Event) bool {
		return by(e) && e.Verb == "delete" && e.Resource == "pods" && e.Subresource == "" && e.Namespace == podsNS && e.Name == name
	})
}

func (tl *podsTimeline) evictions() {
	s := tl.s
	if e, ok := tl.deleted(s.p1.Name, tl.byController, tl.res.FaultAt); ok {
		tl.mark("p1-evicted", e.Completed, plane.OwnerKube, "audit log of "+e.Server,
			"P1 evicted (%s): the NoExecute taint outlasted its toleration (%d s); graceful deletion, the object stays", e.User, s50tolerationSec)
		at := e.Completed.Sub(tl.res.FaultAt).Seconds()
		tl.fact("eviction at %+.2f s with the pods' toleration of %d s; with the default (DefaultTolerationSeconds, %d s) it would come at about %+.0f s, %.1f minutes after the fault",
			at, s50tolerationSec, s50defaultTolSec, at-s50tolerationSec+s50defaultTolSec, (at-s50tolerationSec+s50defaultTolSec)/60)
	} else {
		tl.problem("P1 (%s) was never evicted", s.p1.Name)
	}
	if e, ok := tl.deleted(s50dbPod, tl.byController, tl.res.FaultAt); ok {
		tl.mark("db-evicted", e.Completed, plane.OwnerKube, "audit log of "+e.Server,
			"%s (StatefulSet) evicted (%s): graceful deletion, the object stays until the node acknowledges", s50dbPod, e.User)
	}
}

func (tl *podsTimeline) replacement() {
	s := tl.s
	rep, ok := s.replacement(tl.other)
	if !ok {
		tl.problem("P1 was not replaced on %s", s.otherW)
		return
	}
	if ev, ok := tl.deleted(s.p1.Name, tl.byController, tl.res.FaultAt); ok {
		if e, ok := tl.first(ev.Received, func(e audit.Event) bool {
			return tl.byController(e) && e.Verb == "create" && e.Resource == "pods" && e.Subresource == "" && e.Namespace == podsNS
		}); ok {
			tl.mark("rep-created", e.Completed, plane.OwnerKube, "audit log of "+e.Server, "ReplicaSet controller creates P1's replacement (%s)", e.User)
		}
	}
	if e, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool {
		return e.Role() == audit.Scheduler && e.Resource == "pods" && e.Subresource == "binding" && e.Name == rep.Name
	}); ok {
		tl.mark("rep-bound", e.Completed, plane.OwnerKube, "audit log of "+e.Server, "kube-scheduler (on %s) binds the replacement %s to %s", tl.opts.Master(e), rep.Name, s.otherW)
	}
	tl.mark("rep-running", rep.At, plane.OwnerKube, "pod log of "+s.otherW+"'s agent",
		"%s's agent runs the replacement %s: from here P1 and its replacement both run", s.otherW, rep.Name)
	p1 := podsInterval(tl.cut, s.p1.UID)
	r := podsInterval(tl.other, rep.UID)
	end := time.Now()
	if from, to, ok := agent.Both(p1, r, end); ok {
		tl.fact("P1 %s on %s and its replacement %s on %s both ran from %s to %s: %.2f s (P1 ran on until its node reached an apiserver again, %.2f s after the heal)",
			s.p1.Name, s.cutW, rep.Name, s.otherW, tl.rel(from), tl.rel(to), to.Sub(from).Seconds(), to.Sub(tl.res.HealAt).Seconds())
	}
	if !p1.To.IsZero() && p1.To.Before(tl.res.HealAt) {
		tl.problem("P1 stopped on %s at %s, before the heal", s.cutW, tl.rel(p1.To))
	}
}

func podsInterval(recs []agent.Record, uid types.UID) agent.Interval {
	for _, iv := range agent.Intervals(recs) {
		if iv.UID == uid {
			return iv
		}
	}
	return agent.Interval{}
}

func (tl *podsTimeline) afterHeal() {
	s, heal := tl.s, tl.res.HealAt
	for _, rec := range tl.cut {
		if rec.Event == agent.EventFound && rec.At.After(heal) {
			tl.mark("found", rec.At, plane.OwnerKube, "pod log of "+s.cutW+"'s agent", "%s's agent reaches an apiserver again", s.cutW)
			break
		}
	}
	if rec, ok := podsStopped(tl.cut, s.p1.UID); ok {
		tl.mark("p1-stopped", rec.At, plane.OwnerKube, "pod log of "+s.cutW+"'s agent", "%s's agent stops P1 (%s): both ran until here", s.cutW, rec.Reason)
	}
	byNode := func(e audit.Event) bool { return e.User == "system:node:"+s.cutW }
	if e, ok := tl.deleted(s.p1.Name, byNode, heal); ok {
		tl.mark("p1-ack", e.Completed, plane.OwnerKube, "audit log of "+e.Server, "%s acknowledges P1's deletion (grace 0): the object is gone", s.cutW)
	}
	ack, acked := tl.deleted(s50dbPod, byNode, tl.res.FaultAt)
	if acked {
		tl.mark("db-ack", ack.Completed, plane.OwnerKube, "audit log of "+ack.Server, "%s acknowledges %s's deletion: only now may the StatefulSet create it again", s.cutW, s50dbPod)
	}
	created, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool {
		return tl.byController(e) && e.Verb == "create" && e.Resource == "pods" && e.Subresource == "" && e.Namespace == podsNS && e.Name == s50dbPod
	})
	if ok {
		tl.mark("db-created", created.Completed, plane.OwnerKube, "audit log of "+created.Server, "StatefulSet controller creates %s again (%s)", s50dbPod, created.User)
		if created.Completed.Before(tl.res.HealAt) || (acked && created.Completed.Before(ack.Completed)) {
			tl.problem("%s created again at %s, before its predecessor's deletion was acknowledged", s50dbPod, tl.rel(created.Completed))
		}
	}
	if e, ok := tl.first(tl.res.FaultAt, func(e audit.Event) bool {
		return e.Role() == audit.Scheduler && e.Resource == "pods" && e.Subresource == "binding" && e.Namespace == podsNS && e.Name == s50dbPod
	}); ok {
		tl.mark("db-bound", e.Completed, plane.OwnerKube, "audit log of "+e.Server, "kube-scheduler (on %s) binds the new %s", tl.opts.Master(e), s50dbPod)
	}
	if rec, ok := s.dbSuccessor(tl.cut, tl.other); ok {
		tl.mark("db-running", rec.At, plane.OwnerKube, "pod log of "+rec.Node+"'s agent", "%s runs again, on %s", s50dbPod, rec.Node)
		old := podsInterval(tl.cut, s.db.UID)
		succ := podsInterval(append(slices.Clone(tl.cut), tl.other...), rec.UID)
		if from, to, both := agent.Both(old, succ, time.Now()); both {
			tl.problem("two %s ran at once from %s to %s", s50dbPod, tl.rel(from), tl.rel(to))
		} else {
			tl.fact("StatefulSet: %s ran on %s until %s (after the heal); its successor ran from %s on %s: never two at once, and no %s ran anywhere else while %s was cut off",
				s50dbPod, s.cutW, tl.rel(old.To), tl.rel(succ.From), rec.Node, s50dbPod, s.cutW)
		}
	}
}

// untouched: P2 ran on through the fault, and nothing wrote to it.
func (tl *podsTimeline) untouched() {
	s := tl.s
	p2 := podsInterval(tl.other, s.p2.UID)
	var writes []string
	for _, e := range tl.evs {
		if e.Completed.After(tl.res.FaultAt) && e.Write() && e.Accepted() && e.Namespace == podsNS && e.Resource == "pods" && e.Name == s.p2.Name {
			writes = append(writes, e.Verb+" "+e.Object()+" by "+e.User)
		}
	}
	switch {
	case p2.From.IsZero():
		tl.problem("P2 (%s) has no run in %s's pod log", s.p2.Name, s.otherW)
	case !p2.To.IsZero():
		tl.problem("P2 (%s) stopped on %s at %s", s.p2.Name, s.otherW, tl.rel(p2.To))
	case len(writes) > 0:
		tl.problem("P2 (%s) written after the fault: %s", s.p2.Name, strings.Join(writes, "; "))
	default:
		tl.fact("P2 %s on %s ran from before the fault (%s) to the end of the trial without a stop, and no write to it was accepted after the fault (not even its Ready condition)",
			s.p2.Name, s.otherW, tl.rel(p2.From))
	}
}
