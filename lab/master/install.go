package master

import (
	"context"
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/witness"
)

// Paths inside every master (the lab's shared directory is bound at /lab).
const (
	LabDir        = "/lab"
	LabBinary     = "/lab/bin/kha-lab"
	WitnessDir    = "/lab/witness"
	UnitDir       = "/etc/systemd/system"
	restartPeriod = 200 * time.Millisecond
)

// Witness describes one witness unit standing in for a managed unit.
type Witness struct {
	Unit string // systemd unit name without .service, e.g. kube-scheduler
}

// Service is the unit file name.
func (w Witness) Service() string { return w.Unit + ".service" }

// Binary is the witness's executable inside a master: kha-lab under the
// component's own name (a hard link), as a real kube-scheduler has its own
// binary. A supervisor that looks for stray copies of a managed component
// by executable then finds the witnesses, and not the lab's other uses of
// kha-lab (hooks).
func (w Witness) Binary() string { return LabDir + "/bin/" + w.Unit }

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
ExecStart=%[3]s witness --node %[1]s --unit %[2]s --dir %[4]s --faults %[6]s
Restart=on-failure
RestartSec=%[5]dms
`, node, w.Unit, w.Binary(), WitnessDir, restartPeriod.Milliseconds(), FaultDir)
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

// FaultDir is where witnesses look for their fault files (in the shared
// directory, so the host writes them without touching the container).
const FaultDir = LabDir + "/faults"

// SetFault makes w's witness on n misbehave from its next start on (or, with
// a zero Fault, behave again). Only a file changes: no unit file, no
// daemon-reload, so injecting the fault disturbs nothing else on the node.
func (n *Node) SetFault(w Witness, f Fault) error {
	path := witness.FaultFile(FaultDir, n.Name, w.Unit)
	if f == (Fault{}) {
		return n.RemoveFile(path)
	}
	return n.WriteFile(path, witness.FormatFault(f.IgnoreTerm, f.CrashAfter), 0o644)
}
