package plane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

// What the faults of scenarios 41-48 need from the plane.

// EtcdLeader is the etcd member that reports itself raft leader.
func (p *Plane) EtcdLeader(ctx context.Context) (string, error) { return p.Lab.Etcd.Leader(ctx) }

// handPIDFile is where a component started by hand records its PID
// (inside the master).
const handPIDFile = "/run/kha-lab-by-hand.pid"

// HandPort is the secure port of a component started by hand: the unit's
// own may be taken (leader election runs the units on both masters).
const HandPort = 10359

// ByHand is a component an operator started on a shell, outside any unit.
type ByHand struct {
	Node *master.Node
	PID  int // as the master sees it
}

// StartByHand starts component name on n by hand, as an operator would:
// setsid, the unit's own command line for mode (its kubeconfig, its
// --leader-elect), outside any unit; only the secure port differs
// (HandPort).
func (p *Plane) StartByHand(ctx context.Context, n *master.Node, name string, mode Mode) (ByHand, error) {
	c, err := p.Component(n.Name, name, mode)
	if err != nil {
		return ByHand{}, err
	}
	f, err := c.Prepare()
	if err != nil {
		return ByHand{}, err
	}
	argv := append([]string{c.Binary}, c.Args(f)...)
	argv = append(argv, "--secure-port="+strconv.Itoa(HandPort))
	_ = n.RemoveFile(handPIDFile)
	sh := fmt.Sprintf("echo $$ > %s; exec %s </dev/null >>/var/log/%s-by-hand.log 2>&1", handPIDFile, strings.Join(argv, " "), name)
	if _, err := n.Exec(ctx, "setsid", "--fork", "sh", "-c", sh); err != nil {
		return ByHand{}, err
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(filepath.Join(n.Root(), handPIDFile))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return ByHand{Node: n, PID: pid}, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return ByHand{}, fmt.Errorf("plane: %s started by hand on %s: no PID in %s", name, n.Name, handPIDFile)
}

// Alive reports whether the process still runs.
func (h ByHand) Alive(ctx context.Context) bool {
	_, code := h.Node.Run(ctx, "kill", "-0", strconv.Itoa(h.PID))
	return code == 0
}

// Kill ends it with SIGKILL (nothing when it is gone).
func (h ByHand) Kill(ctx context.Context) error {
	if !h.Alive(ctx) {
		return nil
	}
	_, err := h.Node.Exec(ctx, "kill", "-9", strconv.Itoa(h.PID))
	return err
}

// Watch reports when the process ended (zero if it still ran at ctx's end).
func (h ByHand) Watch(ctx context.Context) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		for ctx.Err() == nil {
			if !h.Alive(ctx) {
				out <- time.Now()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		out <- time.Time{}
	}()
	return out
}
