package master

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Paths inside every master (the lab's shared directory is bound at /lab).
const (
	LabDir        = "/lab"
	LabBinary     = "/lab/bin/kha-lab"
	WitnessDir    = "/lab/witness"
	UnitDir       = "/etc/systemd/system"
	FaultDropin   = "90-lab-fault.conf" // under /run/systemd/system/UNIT.d: volatile, highest priority
	runtimeUnits  = "/run/systemd/system"
	restartPeriod = 200 * time.Millisecond
)

// Witness describes one witness unit standing in for a managed unit.
type Witness struct {
	Unit string // systemd unit name without .service, e.g. kube-scheduler
}

// Service is the unit file name.
func (w Witness) Service() string { return w.Unit + ".service" }

// witnessUnit renders the unit file of w on node. Restart=on-failure as a
// real kube-scheduler unit has it: a crash-looping unit is the supervisor's
// problem to notice (scenario 12). The unit is never enabled: only the
// supervisor starts it.
func witnessUnit(node string, w Witness) []byte {
	return fmt.Appendf(nil, `# Written by kha-lab: a witness standing in for %[2]s.
[Unit]
Description=kha-lab witness for %[2]s
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart=%[3]s witness --node %[1]s --unit %[2]s --dir %[4]s
Restart=on-failure
RestartSec=%[5]dms
`, node, w.Unit, LabBinary, WitnessDir, restartPeriod.Milliseconds())
}

// InstallWitnesses writes the witness unit files and reloads systemd.
func (n *Node) InstallWitnesses(ctx context.Context, ws []Witness) error {
	for _, w := range ws {
		if err := n.WriteFile(UnitDir+"/"+w.Service(), witnessUnit(n.Name, w), 0o644); err != nil {
			return err
		}
	}
	_, err := n.Systemctl(ctx, "daemon-reload")
	return err
}

// Fault is a way to make a witness misbehave.
type Fault struct {
	IgnoreTerm bool          // only SIGKILL ends it (scenario 8)
	CrashAfter time.Duration // exits 1 after this long, so systemd restarts it (scenario 12)
}

// SetFault installs (or with a zero Fault removes) a runtime drop-in that
// changes how w's witness behaves, then reloads systemd. It takes effect at
// the unit's next start.
func (n *Node) SetFault(ctx context.Context, w Witness, f Fault) error {
	path := runtimeUnits + "/" + w.Service() + ".d/" + FaultDropin
	if f == (Fault{}) {
		if err := n.RemoveFile(path); err != nil {
			return err
		}
	} else {
		args := []string{LabBinary, "witness", "--node", n.Name, "--unit", w.Unit, "--dir", WitnessDir}
		if f.IgnoreTerm {
			args = append(args, "--ignore-term")
		}
		if f.CrashAfter > 0 {
			args = append(args, "--crash-after", f.CrashAfter.String())
		}
		text := fmt.Sprintf("# Written by kha-lab: fault injection.\n[Service]\nExecStart=\nExecStart=%s\n", strings.Join(args, " "))
		if err := n.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	_, err := n.Systemctl(ctx, "daemon-reload")
	return err
}
