// Package witness is the lab's stand-in for kube-scheduler and
// kube-controller-manager, and the judge of the one property that matters:
// two nodes never run the same unit at the same instant.
//
// A witness appends a heartbeat line every Period to its own file in a
// directory shared by every node (one file per node and unit, so writers never
// interleave; each line is one write(2) to an O_APPEND file). The checker reads
// them all back and reports every overlap.
package witness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Period is the heartbeat interval.
const Period = 20 * time.Millisecond

// Grace is how long after its last heartbeat an instance still counts as
// alive (brief section 7: alive = last heartbeat less than 2 periods ago).
const Grace = 2 * Period

// Options configures one witness process.
type Options struct {
	Node       string
	Unit       string
	Dir        string        // shared log directory
	IgnoreTerm bool          // keep running on SIGTERM (only SIGKILL ends it)
	CrashAfter time.Duration // exit 1 after this long; 0 = never
	// FaultDir holds optional fault files named NODE.UNIT, read at start:
	// the lab injects a fault by writing one and restarting the unit, so
	// the unit file (and systemd's configuration) never changes.
	FaultDir string
}

// FaultFile is the fault file of node's unit inside dir.
func FaultFile(dir, node, unit string) string { return filepath.Join(dir, node+"."+unit) }

// FormatFault renders a fault file: one setting per line.
func FormatFault(ignoreTerm bool, crashAfter time.Duration) []byte {
	var b strings.Builder
	if ignoreTerm {
		b.WriteString("ignore-term\n")
	}
	if crashAfter > 0 {
		fmt.Fprintf(&b, "crash-after=%s\n", crashAfter)
	}
	return []byte(b.String())
}

// applyFaultFile folds the fault file (if any) into o.
func applyFaultFile(o *Options) error {
	if o.FaultDir == "" {
		return nil
	}
	b, err := os.ReadFile(FaultFile(o.FaultDir, o.Node, o.Unit))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case line == "ignore-term":
			o.IgnoreTerm = true
		case strings.HasPrefix(line, "crash-after="):
			d, err := time.ParseDuration(strings.TrimPrefix(line, "crash-after="))
			if err != nil {
				return fmt.Errorf("witness: fault file: %w", err)
			}
			o.CrashAfter = d
		default:
			return fmt.Errorf("witness: fault file: unknown setting %q", line)
		}
	}
	return nil
}

// FileName is the log file of node's unit inside the shared directory.
func FileName(node, unit string) string { return node + "." + unit + ".log" }

// Run writes heartbeats until ctx ends (nil error), CrashAfter passes (an
// error), or a write fails.
func Run(ctx context.Context, o Options) error {
	if o.Node == "" || o.Unit == "" || o.Dir == "" {
		return fmt.Errorf("witness: node, unit and directory are required")
	}
	if strings.ContainsAny(o.Node+o.Unit, " \n/") {
		return fmt.Errorf("witness: node %q and unit %q must not hold spaces or slashes", o.Node, o.Unit)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(o.Dir, FileName(o.Node, o.Unit)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	defer f.Close()
	pid, started := os.Getpid(), time.Now().UnixNano()
	var crash <-chan time.Time
	if o.CrashAfter > 0 {
		crash = time.After(o.CrashAfter)
	}
	tick := time.NewTicker(Period)
	defer tick.Stop()
	buf := make([]byte, 0, 128)
	for {
		// The timestamp is taken right before the write: the instant the
		// line claims is never later than the instant it becomes visible.
		buf = fmt.Appendf(buf[:0], "%d %s %s %d %d\n", time.Now().UnixNano(), o.Node, o.Unit, pid, started)
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("witness: heartbeat: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-crash:
			return fmt.Errorf("witness: crashing after %s as asked", o.CrashAfter)
		case <-tick.C:
		}
	}
}

// Main is `kha-lab witness`: it applies the fault file, then wires signals:
// SIGTERM and SIGINT end the witness unless IgnoreTerm is set.
func Main(o Options) error {
	if err := applyFaultFile(&o); err != nil {
		return err
	}
	if o.IgnoreTerm {
		signal.Ignore(syscall.SIGTERM)
		return Run(context.Background(), o)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, o)
}
