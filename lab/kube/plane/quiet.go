package plane

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// The quiet gate's bounds. A healthy apiserver answers a consistent LIST
// of a few objects in milliseconds on this machine; one still waiting on
// an etcd connection that a long cut left behind takes seconds or times
// out (seen: scenario 69 run 8-33 s after 50's 85 s cut of m1 met
// "Handler timeout"s from m1's apiserver in its first 10 s, in every mode).
const (
	quietAnswer  = time.Second // one consistent LIST's bound
	quietRounds  = 3           // consecutive rounds every apiserver passes
	quietEvery   = 500 * time.Millisecond
	quietTimeout = 2 * time.Minute // then the trial goes on, with a note
	quietNoteAt  = 2 * time.Second // a longer wait is noted in the result
)

// quiet waits until every master's apiserver answers consistent reads
// (resourceVersion "", so served only once etcd was reached) of pods,
// nodes and leases, and its /readyz, within quietAnswer, quietRounds
// rounds in a row: the previous trial's fault must not still weigh on the
// plane the next one measures. It returns a note when the wait was long or
// did not end.
func (r *Runner) quiet(ctx context.Context, timeout time.Duration) string {
	start := time.Now()
	deadline := start.Add(timeout)
	passed := 0
	var last string
	for ctx.Err() == nil {
		if slow := r.slowAPIServers(ctx); len(slow) == 0 {
			passed++
		} else {
			passed, last = 0, strings.Join(slow, "; ")
		}
		if passed == quietRounds {
			if w := time.Since(start); w > quietNoteAt {
				return fmt.Sprintf("quiet gate: waited %.1f s before the fault until every apiserver answered consistent reads and /readyz within %s (last slow: %s)", w.Seconds(), quietAnswer, last)
			}
			return ""
		}
		if time.Now().After(deadline) {
			return fmt.Sprintf("quiet gate: the plane was not quiet after %s (last slow: %s); the fault went ahead", timeout, last)
		}
		time.Sleep(quietEvery)
	}
	return ""
}

// slowAPIServers returns, for each apiserver that failed a consistent read
// or took longer than quietAnswer, what it did.
func (r *Runner) slowAPIServers(ctx context.Context) []string {
	reads := []struct {
		what string
		list func(context.Context, kubernetes.Interface) error
	}{
		{"pods", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Pods(probe.DefaultNamespace).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{"nodes", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		{"leases", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoordinationV1().Leases(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{Limit: 1})
			return err
		}},
		// The apiserver's own verdict, etcd check included: the LISTs can
		// pass while part of its etcd connections still hang (a 69 trial
		// on 6 December started 1 s before m1's /readyz stopped timing out
		// after 50's cut, and its new leader's scheduler, on m1, waited
		// 6.2 s from its start for its first binding).
		{"readyz", func(ctx context.Context, c kubernetes.Interface) error {
			rc := c.Discovery().RESTClient()
			if rc == nil {
				return nil // a fake clientset: no server to ask
			}
			_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		}},
	}
	var slow []string
	for i, c := range r.Clients {
		for _, rd := range reads {
			rctx, cancel := context.WithTimeout(ctx, quietAnswer)
			t0 := time.Now()
			err := rd.list(rctx, c)
			took := time.Since(t0)
			cancel()
			if err != nil || took > quietAnswer {
				slow = append(slow, fmt.Sprintf("%s %s in %.2f s (%v)", lab.MasterNames[i], rd.what, took.Seconds(), err))
				break
			}
		}
	}
	return slow
}
