package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
	"github.com/kha-supervisor/kha-supervisor/probe"
)

// drillProbe is the user's view of a drill (--probe-kubeconfig): the lab's
// prober against the live cluster, a pod every 200 ms in namespace
// kha-probe and a ReplicaSet of one whose pod it deletes every 2 s, so the
// drill can say when pods were bound and replaced again, not only when the
// units ran.
type drillProbe struct {
	pr      *probe.Prober
	cancel  context.CancelFunc
	done    chan struct{}
	figs    probe.Figures
	from    time.Duration // the figures' instant, after the request
	waited  time.Duration
	stopped bool
}

// startDrillProbe sets the prober up and starts it; nil without kubeconfigs.
func startDrillProbe(kubeconfigs []string, namespace string) (*drillProbe, error) {
	if len(kubeconfigs) == 0 {
		return nil, nil
	}
	var cs []*kubeapi.Client
	for _, path := range kubeconfigs {
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, &badProbeFlag{fmt.Errorf("--probe-kubeconfig %s: %w", path, err)}
		}
		c, err := kubeapi.New(rc)
		if err != nil {
			return nil, fmt.Errorf("--probe-kubeconfig %s: %w", path, err)
		}
		cs = append(cs, c)
	}
	d := &drillProbe{pr: &probe.Prober{Servers: cs, Namespace: namespace}, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.pr.Setup(ctx); err != nil {
		var foreign *probe.ForeignNamespaceError
		if errors.As(err, &foreign) {
			return nil, &badProbeFlag{fmt.Errorf("--probe-namespace: %w", foreign)}
		}
		return nil, fmt.Errorf("probe: create namespace %s and its ReplicaSet: %w", namespace, err)
	}
	var rctx context.Context
	rctx, d.cancel = context.WithCancel(context.Background())
	go func() { defer close(d.done); d.pr.Run(rctx) }()
	time.Sleep(2 * probe.DeleteEvery) // a baseline before the request
	return d, nil
}

// finish waits (up to timeout) until a pod created after from (the old
// units' stop) was bound and a ReplicaSet pod deleted after it replaced,
// stops the prober and deletes its namespace.
func (d *drillProbe) finish(requested, from time.Time, timeout time.Duration) {
	if d == nil {
		return
	}
	d.from = from.Sub(requested)
	deadline := time.Now().Add(timeout)
	for {
		d.figs = d.pr.Snapshot().Figures(from, time.Now())
		if (d.figs.Bound && d.figs.Replaced) || time.Now().After(deadline) {
			break
		}
		time.Sleep(probe.CreateEvery)
	}
	d.waited = time.Since(requested)
	d.stop()
}

// stop ends the prober and deletes its namespace; again is a no-op.
func (d *drillProbe) stop() {
	if d == nil || d.stopped {
		return
	}
	d.stopped = true
	d.cancel()
	<-d.done
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.pr.Cleanup(ctx)
}

func (d *drillProbe) print(w io.Writer) {
	if d == nil {
		return
	}
	f := d.figs
	if f.Bound {
		fmt.Fprintf(w, "  %+9.3fs  probe: first pod created after the old units stopped bound (longest a pod waited: %.3fs)\n",
			(d.from + f.FirstBind).Seconds(), f.LongestUnbound.Seconds())
	}
	if f.Replaced {
		fmt.Fprintf(w, "  %+9.3fs  probe: first ReplicaSet pod deleted after the old units stopped replaced (longest wait: %.3fs)\n",
			(d.from + f.FirstReplaced).Seconds(), f.LongestUnreplaced.Seconds())
	}
}

// problems are the probe's part of the verdict.
func (d *drillProbe) problems() []string {
	if d == nil {
		return nil
	}
	var bad []string
	if !d.figs.Bound {
		bad = append(bad, fmt.Sprintf("probe: no pod created after the old units stopped was bound within %s of the request", d.waited.Round(time.Second)))
	}
	if !d.figs.Replaced {
		bad = append(bad, fmt.Sprintf("probe: no ReplicaSet pod deleted after the old units stopped was replaced within %s of the request", d.waited.Round(time.Second)))
	}
	return bad
}

// badProbeFlag is a --probe-kubeconfig that cannot be read: bad input.
type badProbeFlag struct{ error }

func (b *badProbeFlag) Unwrap() error { return b.error }
