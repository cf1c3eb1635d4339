package agent

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Running is a pod the agent runs (it has no containers: "running" is the
// agent's word that it would still be running the pod's processes).
type Running struct {
	Namespace, Name string
	UID             types.UID
}

// Stop is a pod the agent stops, and why.
type Stop struct {
	Running
	Reason string
}

// Decision is what one sync with a reachable apiserver asks the agent to
// do, as a kubelet would:
//   - Start: pods bound to the node it does not run yet (it runs them and
//     reports them Running and Ready);
//   - Status: pods it runs whose status at the apiserver says otherwise
//     (reported Running and Ready again);
//   - Stop: pods it runs that were deleted at the apiserver (graceful
//     deletion begun, or the object gone: evicted, force deleted);
//   - Ack: pods whose graceful deletion it acknowledges once it no longer
//     runs them (delete with grace period 0: only then is the object gone,
//     and only then does a StatefulSet create the pod's successor).
//
// A sync that reaches no apiserver decides nothing: a kubelet does not stop
// pods because it lost the apiserver, so the agent keeps running them.
type Decision struct {
	Start, Status, Ack []corev1.Pod
	Stop               []Stop
}

// Decide compares the pods the agent runs with the pods the apiserver has
// bound to the node (remote: one consistent list).
func Decide(running map[types.UID]Running, remote []corev1.Pod) Decision {
	var d Decision
	seen := map[types.UID]bool{}
	for _, p := range remote {
		seen[p.UID] = true
		r, runs := running[p.UID]
		switch {
		case p.DeletionTimestamp != nil:
			if runs {
				d.Stop = append(d.Stop, Stop{r, "deletion requested at the apiserver"})
			}
			d.Ack = append(d.Ack, p)
		case terminal(p):
			if runs {
				d.Stop = append(d.Stop, Stop{r, "pod " + string(p.Status.Phase) + " at the apiserver"})
			}
		case !runs:
			d.Start = append(d.Start, p)
		case !reportedRunning(p):
			d.Status = append(d.Status, p)
		}
	}
	for uid, r := range running {
		if !seen[uid] {
			d.Stop = append(d.Stop, Stop{r, "gone at the apiserver"})
		}
	}
	return d
}

func terminal(p corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// reportedRunning: the apiserver's status says Running and Ready (the node
// lifecycle controller sets Ready to False on the pods of a node it lost).
func reportedRunning(p corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func runningOf(p corev1.Pod) Running {
	return Running{Namespace: p.Namespace, Name: p.Name, UID: p.UID}
}
