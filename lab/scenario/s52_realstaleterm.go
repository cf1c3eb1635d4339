package scenario

import (
	"context"
	"fmt"
	"strings"
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

// staleWrites is how many writes of each kind scenario 52 sends to each
// apiserver.
const staleWrites = 10

// Scenario 52 (real plane, issue 12): a stale term. The leader's
// supervisor is stopped (a graceful handoff: the standby promotes and
// publishes its token); then, from the old leader's namespace, writes are
// sent as its scheduler with its token, exactly what its gate forwarded
// (the state of a paused node that resumes): events and bindings, to both
// apiservers. Every one must be refused with the policy's message.
func init() {
	registerReal(plane.Spec{ID: 52, Name: "real: stale term's writes after a failover",
		Fault: "the leader's supervisor stopped (handoff); then writes as its scheduler with its token to both apiservers",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			p := t.R.P
			old, err := p.HeldToken(ctx)
			if err != nil || old == 0 {
				return nil, fmt.Errorf("the leader's token: %d, %v (token mode?)", old, err)
			}
			n := t.Node()
			heal := func(ctx context.Context) error {
				_, err := n.Systemctl(ctx, "start", lab.SupervisorUnit)
				return err
			}
			if _, err := n.Systemctl(ctx, "stop", lab.SupervisorUnit); err != nil {
				return heal, err
			}
			if err := waitNewToken(ctx, p, old); err != nil {
				return heal, err
			}
			t.Figures("stale_token", float64(old))
			t.Mark("stale-start")
			sent, refused, err := sendStale(ctx, t, old)
			t.Mark("stale-end")
			t.Figures("stale_sent", float64(sent))
			t.Figures("stale_refused_at_client", float64(refused))
			return heal, err
		},
		Judge: func(t *plane.Trial, evs []audit.Event, res *report.Result) {
			from, to := t.Marks["stale-start"], t.Marks["stale-end"]
			stale := fmt.Sprint(int64(res.Figures.Values["stale_token"]))
			acc, ref := 0, 0
			for _, e := range evs {
				// Only what was sent with the old token: the new leader's
				// units write meanwhile (with theirs).
				if e.Received.Before(from) || e.Received.After(to) || !audit.Managed(e) || !e.Write() || e.DryRun ||
					len(e.Token) != 1 || e.Token[0] != stale {
					continue
				}
				if e.Accepted() {
					acc++
				} else if audit.PolicyRefusal(e) {
					ref++
				}
			}
			res.Figures.Values["stale_accepted_at_resource"], res.Figures.Values["stale_refused_at_resource"] = float64(acc), float64(ref)
			if acc > 0 || float64(ref) < res.Figures.Values["stale_sent"] || res.Figures.Values["stale_sent"] == 0 {
				res.Problems = append(res.Problems, fmt.Sprintf("stale term: sent %v, the apiservers accepted %d and the policy refused %d; want all refused",
					res.Figures.Values["stale_sent"], acc, ref))
			}
		}})
}

// waitNewToken waits until the parameter holds a token other than old.
func waitNewToken(ctx context.Context, p *plane.Plane, old int64) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if tok, err := p.HeldToken(ctx); err == nil && tok != old && tok != 0 {
			return nil
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("no new token published within a minute after %d", old)
}

// sendStale sends staleWrites events and bindings to each apiserver as
// the old leader's scheduler with token; it counts the writes sent and
// those refused with the policy's message.
func sendStale(ctx context.Context, t *plane.Trial, token int64) (sent, refused int, err error) {
	pod, err := stalePod(ctx, t)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		_ = t.R.Clients[0].CoreV1().Pods(probe.DefaultNamespace).Delete(context.WithoutCancel(ctx), pod, *metav1.NewDeleteOptions(0))
	}()
	return sendStaleTo(ctx, t, token, pod, lab.MasterNames)
}

// sendStaleTo sends staleWrites events and bindings of pod to each of
// servers' apiservers as the old leader's scheduler with token.
func sendStaleTo(ctx context.Context, t *plane.Trial, token int64, pod string, servers []string) (sent, refused int, err error) {
	var unexpected []string
	for _, server := range servers {
		c, err := t.R.P.StaleScheduler(t.Leader, server, token)
		if err != nil {
			return sent, refused, err
		}
		for i := range staleWrites {
			for _, w := range []func() error{
				func() error { return staleEvent(ctx, c, i) },
				func() error { return staleBind(ctx, c, pod) },
			} {
				sent++
				switch err := w(); {
				case apifence.IsPolicyDenial(err) && strings.Contains(err.Error(), "does not carry the current fencing token"):
					refused++
				case err == nil:
					unexpected = append(unexpected, server+": accepted")
				default:
					unexpected = append(unexpected, server+": "+err.Error())
				}
			}
		}
	}
	if len(unexpected) > 0 {
		return sent, refused, fmt.Errorf("stale writes not refused by the policy: %d, first: %s", len(unexpected), unexpected[0])
	}
	return sent, refused, nil
}

func staleEvent(ctx context.Context, c kubernetes.Interface, i int) error {
	now := metav1.NewTime(time.Now())
	_, err := c.CoreV1().Events(probe.DefaultNamespace).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "stale-", Namespace: probe.DefaultNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: probe.DefaultNamespace, Name: fmt.Sprintf("stale-%d", i)},
		Reason:         "StaleTerm", Message: "scenario 52: a write of the previous term", Type: "Normal",
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "default-scheduler"},
	}, metav1.CreateOptions{})
	return err
}

func staleBind(ctx context.Context, c kubernetes.Interface, pod string) error {
	return c.CoreV1().Pods(probe.DefaultNamespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: probe.DefaultNamespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: plane.Workers[0].Name},
	}, metav1.CreateOptions{})
}
