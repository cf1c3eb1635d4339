package scenario

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// Scenarios 58 and 59 (real plane, issue 23 item 1): a paused master's own
// apiserver. An apiserver that was frozen while the other master promoted
// was excused from the confirmation (it gave no answer); on the thaw its
// policy's parameter cache still holds the old token. Right after the
// thaw, writes carrying the old token are sent to it as the old leader's
// scheduler (what the old leader's gate forwards when its master resumes
// with its clock restored): every one must be refused, and no managed
// write with the old token may be accepted after the thaw (the old gate's
// own included). 58 freezes the whole master together with its apiserver
// (a paused VM); 59 only the apiserver, while the leader's supervisor is
// stopped so that the other master promotes.
func init() {
	registerReal(plane.Spec{ID: 58, Name: "real: whole leader master frozen with its own apiserver, old-token writes to it at the thaw",
		Fault: "cgroup freezer on the leader's container and its kube-apiserver past the takeover; thawed, then old-token writes to that apiserver",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			return injectPausedAPIServer(ctx, t, false)
		},
		Judge: judgePausedAPIServer})
	registerReal(plane.Spec{ID: 59, Name: "real: the leader's apiserver frozen alone across a handoff, old-token writes to it at the thaw",
		Fault: "cgroup freezer on the leader's kube-apiserver; the leader's supervisor stopped (handoff); thawed, then old-token writes to it",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			return injectPausedAPIServer(ctx, t, true)
		},
		Judge: judgePausedAPIServer})
}

func injectPausedAPIServer(ctx context.Context, t *plane.Trial, alone bool) (func(context.Context) error, error) {
	p := t.R.P
	old, err := p.HeldToken(ctx)
	if err != nil || old == 0 {
		return nil, fmt.Errorf("the leader's token: %d, %v (token mode?)", old, err)
	}
	t.Figures("stale_token", float64(old))
	pod, err := stalePod(ctx, t)
	if err != nil {
		return nil, err
	}
	n := t.Node()
	var thaw func() error
	if alone {
		thaw, err = p.FreezeAPIServer(t.Leader)
	} else {
		thaw, err = p.FreezeMaster(n)
	}
	if err != nil {
		return nil, err
	}
	t.Mark("frozen")
	if alone {
		if _, err := n.Systemctl(ctx, "stop", lab.SupervisorUnit); err != nil {
			return func(context.Context) error { return thaw() }, err
		}
	}
	return func(ctx context.Context) error {
		defer func() {
			admin := t.R.Clients[0]
			_ = admin.CoreV1().Pods(probe.DefaultNamespace).Delete(context.WithoutCancel(ctx), pod, *metav1.NewDeleteOptions(0))
		}()
		// The other master must have published its token first (the
		// service may resume before: a trial saw the thaw 3 s in).
		if err := waitNewToken(ctx, p, old); err != nil {
			_ = thaw()
			return err
		}
		// A resumed gate's queue: a burst sent to the frozen apiserver
		// just before the thaw waits in its sockets and is served the
		// moment it thaws, racing its parameter informer.
		queued, err := queueStale(ctx, t, old)
		if err != nil {
			_ = thaw()
			return err
		}
		if err := Sleep(ctx, 300*time.Millisecond); err != nil {
			_ = thaw()
			return err
		}
		if err := thaw(); err != nil {
			return err
		}
		t.Mark("thawed")
		qSent, qRefused := queued()
		// Then at once, as the resumed gate's next writes would arrive.
		sent, refused, err := sendStaleTo(ctx, t, old, pod, []string{t.Leader})
		t.Mark("stale-end")
		t.Figures("stale_sent", float64(sent+qSent))
		t.Figures("stale_queued", float64(qSent))
		t.Figures("stale_refused_at_client", float64(refused+qRefused))
		if alone {
			if _, serr := n.Systemctl(ctx, "start", lab.SupervisorUnit); serr != nil && err == nil {
				err = serr
			}
		}
		return err
	}, nil
}

// staleBurst is how many writes queueStale sends at once.
const staleBurst = 50

// queueStale sends staleBurst events with the old token to the trial's
// leader's (frozen) apiserver from its namespace, all at once, and returns
// how to wait for their answers: how many were sent and refused by the
// token policy or webhook.
func queueStale(ctx context.Context, t *plane.Trial, token int64) (func() (sent, refused int), error) {
	c, err := t.R.P.StaleScheduler(t.Leader, t.Leader, token)
	if err != nil {
		return nil, err
	}
	return queueStaleWith(ctx, c), nil
}

// queueStaleWith is queueStale through client c.
func queueStaleWith(ctx context.Context, c kubernetes.Interface) func() (sent, refused int) {
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range staleBurst {
		wg.Go(func() {
			if err := staleEvent(ctx, c, 1000+i); apifence.IsPolicyDenial(err) {
				refused.Add(1)
			}
		})
	}
	return func() (int, int) { wg.Wait(); return staleBurst, int(refused.Load()) }
}

// stalePod creates the pod the stale bindings try to bind (left pending:
// its scheduler name is nobody's).
func stalePod(ctx context.Context, t *plane.Trial) (string, error) {
	admin := t.R.Clients[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "stale-", Namespace: probe.DefaultNamespace},
		Spec: corev1.PodSpec{SchedulerName: "kha-stale-term", Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
	}
	var err error
	for try := 1; try <= 3; try++ {
		var created *corev1.Pod
		if created, err = admin.CoreV1().Pods(probe.DefaultNamespace).Create(ctx, pod, metav1.CreateOptions{}); err == nil {
			return created.Name, nil
		}
		if err := Sleep(ctx, 500*time.Millisecond); err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("the pod to bind: %w", err)
}

// judgePausedAPIServer counts, at the audit logs, the managed writes with
// the old token accepted after the thaw: the scenario's own and whatever
// the old leader's gate sent.
func judgePausedAPIServer(t *plane.Trial, evs []audit.Event, res *report.Result) {
	thawed, ok := t.Marks["thawed"]
	if !ok {
		res.Problems = append(res.Problems, "never thawed")
		return
	}
	res.Figures.Values["frozen_ms"] = float64(thawed.Sub(t.Marks["frozen"]).Milliseconds())
	stale := fmt.Sprint(int64(res.Figures.Values["stale_token"]))
	acc, ref := 0, 0
	var first time.Time
	for _, e := range evs {
		if e.Received.Before(thawed) || !audit.Managed(e) || !e.Write() || e.DryRun || len(e.Token) != 1 || e.Token[0] != stale {
			continue
		}
		switch {
		case e.Accepted():
			acc++
			if first.IsZero() || e.Received.Before(first) {
				first = e.Received
			}
		case audit.PolicyRefusal(e):
			ref++
		}
	}
	res.Figures.Values["stale_accepted_at_resource"], res.Figures.Values["stale_refused_at_resource"] = float64(acc), float64(ref)
	note := fmt.Sprintf("frozen %s; after the thaw the apiservers accepted %d and refused %d managed writes carrying the old token %s",
		thawed.Sub(t.Marks["frozen"]).Round(time.Millisecond), acc, ref, stale)
	if !first.IsZero() {
		note += fmt.Sprintf(" (the first accepted %s after the thaw)", first.Sub(thawed).Round(time.Millisecond))
	}
	res.Notes = append(res.Notes, note)
	if acc > 0 || res.Figures.Values["stale_sent"] == 0 {
		res.Problems = append(res.Problems, note+": want none accepted")
	}
}
