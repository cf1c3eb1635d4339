package scenario

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// strangerUnit is the transient unit the second scheduler runs in, and
// strangerScheduler the scheduler name of its profile: it binds only the
// pods this scenario creates for it, so its writes are told apart from the
// real scheduler's at the audit log (both present the same certificate).
const (
	strangerUnit      = "kha-lab-hand-scheduler.service"
	strangerScheduler = "kha-lab-hand"
	strangerPods      = 5
	strangerConfig    = "/etc/kubernetes/kha-lab-hand-scheduler.yaml"
	strangerPodPrefix = "kha-lab-hand-"
	// strangerBinary is a copy of the scheduler under another name: the
	// supervisor's stray scan kills a copy of a managed executable (same
	// file, or same base name: scenario 29) at its exec, before it could
	// reach the gate. A copy under another name is what it cannot tell (a
	// component built or packaged elsewhere): the gate is the layer left.
	strangerBinary = "/var/tmp/kha-lab-hand-sched"
)

// Scenario 57 (real plane, issue 23 item 4): a second kube-scheduler
// started by hand ON THE LEADER with the unit's own (gated) kubeconfig, as
// a transient unit of its own. It presents the scheduler's certificate to
// the leader's API gate, which would stamp the current token on its
// writes; the gate must refuse it because it does not run in
// kube-scheduler.service's cgroup. The copy runs under another file name,
// which the stray scan does not recognise (strangerBinary). Judged at the
// apiservers' audit logs:
// none of its pods is bound, while the real scheduler keeps binding.
func init() {
	registerReal(plane.Spec{ID: 57, Name: "real: second scheduler on the leader through its gate",
		Fault: "a renamed copy of kube-scheduler started by hand on the leader (systemd-run, its own unit) with the gated kubeconfig, for 12 s",
		Inject: func(ctx context.Context, t *plane.Trial) (func(context.Context) error, error) {
			n := t.Node()
			admin := t.R.Clients[0]
			var names []string
			for i := range strangerPods {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s%d-%d", strangerPodPrefix, time.Now().UnixMilli()%100000, i), Namespace: probe.DefaultNamespace},
					Spec: corev1.PodSpec{SchedulerName: strangerScheduler, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/none"}}},
				}
				if _, err := admin.CoreV1().Pods(probe.DefaultNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					return nil, fmt.Errorf("the stranger's pods: %w", err)
				}
				names = append(names, pod.Name)
			}
			cleanup := func(ctx context.Context) error {
				_, _ = n.Systemctl(ctx, "stop", strangerUnit)
				for _, name := range names {
					_ = admin.CoreV1().Pods(probe.DefaultNamespace).Delete(ctx, name, *metav1.NewDeleteOptions(0))
				}
				return nil
			}
			cfg := fmt.Sprintf("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"+
				"clientConnection:\n  kubeconfig: %s\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: %s\n",
				plane.NodeKubeconfigs[kube.Scheduler], strangerScheduler)
			if err := n.WriteFile(strangerConfig, []byte(cfg), 0o600); err != nil {
				return cleanup, err
			}
			c, err := t.R.P.Component(n.Name, kube.Scheduler, plane.KhaMode(t.R.P.Lab.Config().Profile))
			if err != nil {
				return cleanup, err
			}
			if out, err := n.Exec(ctx, "cp", c.Binary, strangerBinary); err != nil {
				return cleanup, fmt.Errorf("copy the scheduler: %w: %s", err, out)
			}
			since := time.Now()
			if out, err := n.Exec(ctx, "systemd-run", "--unit", strangerUnit, "--collect", "--",
				strangerBinary, "--config="+strangerConfig, "--secure-port=0", "-v=2"); err != nil {
				return cleanup, fmt.Errorf("start the stranger: %w: %s", err, out)
			}
			t.Mark("hand-start")
			err = Sleep(ctx, handRun)
			t.Mark("hand-stop")
			_, _ = n.Systemctl(ctx, "stop", strangerUnit)
			log, _ := n.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", strangerUnit, "--since", "@"+fmt.Sprint(since.Unix()))
			t.Figures("stranger_403_lines", float64(strings.Count(string(log), "does not run in the gated unit")))
			sup, _ := n.Exec(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", lab.SupervisorUnit, "--since", "@"+fmt.Sprint(since.Unix()))
			t.Figures("gate_refused_errors", float64(strings.Count(string(sup), "API gate refused a connection from a process outside its unit")))
			return cleanup, err
		},
		Judge: judgeStranger,
	})
}

func judgeStranger(t *plane.Trial, evs []audit.Event, res *report.Result) {
	from, to := t.Marks["hand-start"], t.Marks["hand-stop"]
	o := audit.Options{Masters: t.R.P.MasterIPs()}
	strangerBinds, leaderBinds := 0, 0
	for _, e := range evs {
		if e.Received.Before(from) || e.Received.After(to.Add(time.Second)) || !e.Write() || e.DryRun || !e.Accepted() ||
			e.Resource != "pods" || e.Subresource != "binding" {
			continue
		}
		switch {
		case strings.HasPrefix(e.Name, strangerPodPrefix):
			strangerBinds++
		case o.Master(e) == t.Leader && audit.Managed(e):
			leaderBinds++
		}
	}
	res.Figures.Values["stranger_binds_accepted"], res.Figures.Values["leader_binds_meanwhile"] = float64(strangerBinds), float64(leaderBinds)
	refused := res.Figures.Values["gate_refused_errors"] + res.Figures.Values["stranger_403_lines"]
	if strangerBinds > 0 || leaderBinds == 0 || refused == 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("second scheduler on the leader %s through its gate: %d of its bindings accepted, "+
			"%v gate refusals logged (supervisor ERRORs %v, its own 403 lines %v); the real scheduler bound %d pods meanwhile; want 0, > 0, > 0",
			t.Leader, strangerBinds, refused, res.Figures.Values["gate_refused_errors"], res.Figures.Values["stranger_403_lines"], leaderBinds))
	}
}
