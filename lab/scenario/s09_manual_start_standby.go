package scenario

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

func manualStart(ctx context.Context, r *Run) error {
	n := r.Nodes[r.Standby]
	unit := scheduler + ".service"
	r.Undo(func(ctx context.Context) error {
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
		return nil
	})
	fault := time.Now()
	// The guard (ExecStartPre=) answers within a few hundred ms here; if the
	// standby's own enforcement polls the unit while it is still in
	// start-pre, it stops the unit first and the guard's message is lost
	// (the start is refused all the same). Try a few times to see the
	// guard's own answer, and count the other outcome.
	const attempts = 3
	canceled := 0
	msg := ""
	for i := 1; i <= attempts && msg == ""; i++ {
		var out string
		var code int
		at, err := r.Fault("systemctl start "+scheduler+" on the standby "+r.Standby, func() error {
			out, code = n.Run(ctx, "systemctl", "start", unit)
			return nil
		})
		if err != nil {
			return err
		}
		if i == 1 {
			fault = at
		}
		if code == 0 {
			r.Failf("systemctl start on the standby succeeded")
			break
		}
		if err := Sleep(ctx, 300*time.Millisecond); err != nil {
			return err
		}
		for _, line := range strings.Split(r.JournalSince(ctx, r.Standby, unit, at), "\n") {
			if strings.Contains(line, "refusing") && strings.Contains(line, r.Leader) {
				msg = strings.TrimSpace(line)
				r.Notef("refused (systemctl exit %d); guard said: %s", code, msg)
				if r.Res.Figures.GuardMessage == "" {
					r.Res.Figures.GuardMessage = msg
				}
			}
		}
		if msg == "" {
			canceled++
			r.Notef("attempt %d: systemctl said %q; the guard did not answer (the standby stopped the unit in start-pre first)", i, strings.TrimSpace(out))
		}
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
	}
	r.Res.FaultAt = fault
	if canceled > 0 {
		r.Notef("%d of the attempts were stopped by the standby's enforcement before the guard answered", canceled)
	}
	if msg == "" {
		r.Failf("no refusal naming the leader %s from the guard in %d attempts", r.Leader, attempts)
	}
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	r.NoChange(fault, time.Now())
	return nil
}

// guardDropins finds the drop-ins that bind scheduler to the supervisor
// inside n: install-dropins writes /etc, the package ships /usr/lib, and
// either alone keeps the guard in place.
func guardDropins(n *master.Node) ([]string, error) {
	var out []string
	var seen []os.FileInfo
	for _, dir := range []string{"/etc/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		p := dropin.Path(dir, scheduler+".service")
		fi, err := os.Stat(filepath.Join(n.Root(), p))
		if err != nil || slices.ContainsFunc(seen, func(o os.FileInfo) bool { return os.SameFile(o, fi) }) {
			continue // absent, or the same file again (/lib -> usr/lib)
		}
		seen = append(seen, fi)
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s drop-in for %s", n.Name, dropin.FileName, scheduler)
	}
	return out, nil
}
