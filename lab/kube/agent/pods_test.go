package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func pod(name, uid, node string) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
}

func running(ps ...corev1.Pod) map[types.UID]Running {
	out := map[types.UID]Running{}
	for _, p := range ps {
		out[p.UID] = runningOf(p)
	}
	return out
}

func names(ps []corev1.Pod) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestDecideStartsWhatIsBoundAndStopsWhatWasDeleted(t *testing.T) {
	fresh := pod("fresh", "u1", "w1")
	kept := pod("kept", "u2", "w1")
	kept.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	notReady := pod("marked-not-ready", "u3", "w1")
	notReady.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	evicted := pod("evicted", "u4", "w1")
	evicted.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	gone := pod("force-deleted", "u5", "w1")
	unknownDeleted := pod("deleted-before-we-ran-it", "u6", "w1")
	unknownDeleted.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	d := Decide(running(kept, notReady, evicted, gone), []corev1.Pod{fresh, kept, notReady, evicted, unknownDeleted})
	if got := names(d.Start); len(got) != 1 || got[0] != "fresh" {
		t.Errorf("start %v, want [fresh]", got)
	}
	if got := names(d.Status); len(got) != 1 || got[0] != "marked-not-ready" {
		t.Errorf("status %v, want [marked-not-ready] (the node lifecycle controller's Ready=False is reported over)", got)
	}
	stops := map[string]string{}
	for _, s := range d.Stop {
		stops[s.Name] = s.Reason
	}
	if len(stops) != 2 || stops["evicted"] == "" || stops["force-deleted"] == "" {
		t.Errorf("stop %v, want evicted (graceful deletion) and force-deleted (object gone)", stops)
	}
	if got := names(d.Ack); len(got) != 2 || got[0] != "evicted" || got[1] != "deleted-before-we-ran-it" {
		t.Errorf("ack %v, want [evicted deleted-before-we-ran-it]: every graceful deletion is acknowledged", got)
	}
}

func TestDecideLeavesFinishedPodsAlone(t *testing.T) {
	done := pod("done", "u1", "w1")
	done.Status.Phase = corev1.PodSucceeded
	d := Decide(running(done), []corev1.Pod{done})
	if len(d.Start)+len(d.Status)+len(d.Ack) != 0 || len(d.Stop) != 1 {
		t.Errorf("decision %+v, want only the stop of the finished pod", d)
	}
}

func newAgent(t *testing.T, cs *fake.Clientset) *Agent {
	t.Helper()
	return &Agent{Node: "w1", Clients: []kubernetes.Interface{cs}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		PodLog: &PodLog{Path: filepath.Join(t.TempDir(), "pods.jsonl")}, Ignore: map[string]bool{"probe": true}}
}

func podIn(t *testing.T, cs *fake.Clientset, name string) corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("app").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return *p
}

// The whole life of a pod on a node cut off from the apiservers: it is
// started and reported Running, kept while nothing answers (even though it
// was evicted meanwhile), stopped and its deletion acknowledged once an
// apiserver answers again; the pod log shows one interval covering the cut.
func TestAgentKeepsPodsWhileCutOffAndStopsThemAfter(t *testing.T) {
	p1 := pod("p1", "u1", "w1")
	other := pod("elsewhere", "u2", "w2")
	probe := pod("probe-pod", "u3", "w1")
	probe.Namespace = "probe"
	cs := fake.NewClientset(&p1, &other, &probe)
	a := newAgent(t, cs)
	ctx := context.Background()

	a.SyncPods(ctx)
	if got := a.RunningPods(); len(got) != 1 || got[0].Name != "p1" {
		t.Fatalf("running %v, want only p1 (not w2's pod, not the ignored namespace)", got)
	}
	if got := podIn(t, cs, "p1"); !reportedRunning(got) || len(got.Status.ContainerStatuses) != 1 {
		t.Fatalf("p1's status %+v, want Running and Ready with one container status", got.Status)
	}

	cut := errors.New("dial tcp 10.77.1.11:6443: i/o timeout")
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, cut })
	// Meanwhile the other side evicts p1 (graceful deletion: the object
	// stays, with a deletion timestamp, until the node acknowledges).
	ev := podIn(t, cs, "p1")
	ev.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := cs.CoreV1().Pods("app").Update(ctx, &ev, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		a.SyncPods(ctx)
	}
	if got := a.RunningPods(); len(got) != 1 {
		t.Fatalf("running %v while no apiserver answers, want p1 kept (a kubelet does not kill pods for losing the apiserver)", got)
	}

	cs.ReactionChain = cs.ReactionChain[1:] // healed
	a.SyncPods(ctx)
	if got := a.RunningPods(); len(got) != 0 {
		t.Fatalf("running %v after the heal, want p1 stopped (evicted at the apiserver)", got)
	}
	if _, err := cs.CoreV1().Pods("app").Get(ctx, "p1", metav1.GetOptions{}); err == nil {
		t.Fatal("p1 still exists after the heal: want its graceful deletion acknowledged (delete, grace 0)")
	}

	recs, err := ReadPodLog(a.PodLog.Path)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, r := range recs {
		events = append(events, r.Event)
	}
	if want := []string{EventStart, EventLost, EventFound, EventStop}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("pod log events %v, want %v", events, want)
	}
	iv := Intervals(recs)
	if len(iv) != 1 || iv[0].Name != "p1" || iv[0].To.IsZero() || iv[0].StopReason != "deletion requested at the apiserver" {
		t.Errorf("intervals %+v, want p1 from start to the stop after the heal", iv)
	}
}

// A pod force deleted at the apiserver (no graceful deletion to
// acknowledge) is stopped at the next pass that reaches it.
func TestAgentStopsAForceDeletedPod(t *testing.T) {
	p1 := pod("p1", "u1", "w1")
	cs := fake.NewClientset(&p1)
	a := newAgent(t, cs)
	ctx := context.Background()
	a.SyncPods(ctx)
	if err := cs.CoreV1().Pods("app").Delete(ctx, "p1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	a.SyncPods(ctx)
	if got := a.RunningPods(); len(got) != 0 {
		t.Fatalf("running %v, want nothing", got)
	}
}

func TestBothIsTheCommonSpan(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	p1 := Interval{From: at(0), To: at(100)}
	repl := Interval{From: at(70)}
	from, to, ok := Both(p1, repl, at(200))
	if !ok || !from.Equal(at(70)) || !to.Equal(at(100)) {
		t.Errorf("both %v..%v %v, want 70..100", from, to, ok)
	}
	if _, _, ok := Both(Interval{From: at(0), To: at(10)}, Interval{From: at(10)}, at(20)); ok {
		t.Error("back-to-back intervals reported as running at once")
	}
}
