package systemd_test

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/cgroup"
	"github.com/kha-supervisor/kha-supervisor/fencing/procscan"
)

// TestStrayBesideARealUnit: the same executable runs once as a systemd unit
// and once started by hand in the container. Read from the kernel's view, the
// unit's process is inside its unit's control group and the hand-started
// copy is not; signalling the stray leaves the unit alone.
func TestStrayBesideARealUnit(t *testing.T) {
	c := container(t)
	s, _ := newPrivateSystemd(t, c)
	name := "kt-sd-copy-" + strconv.Itoa(os.Getpid())
	const unit = "kt-sd-copy.service"
	b, err := os.ReadFile(c.Root() + "/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile("/usr/local/bin/"+name, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile("/etc/systemd/system/"+unit, []byte("[Service]\nExecStart=/usr/local/bin/"+name+" infinity\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "systemctl", "daemon-reload")
	if err := s.Start(bg(t, 20*time.Second), unit); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(bg(t, 20*time.Second), unit) })
	// By hand, in its own session, as a person would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hand := c.Command(ctx, "setsid", "/usr/local/bin/"+name, "600")
	if err := hand.Start(); err != nil {
		t.Fatal(err)
	}
	handDone := make(chan error, 1)
	go func() { handDone <- hand.Wait() }()

	unitPIDs, err := cgroup.FS{Root: c.Root() + "/sys/fs/cgroup"}.Procs("/system.slice/" + unit)
	if err != nil || len(unitPIDs) != 1 {
		t.Fatalf("unit's cgroup: %v, %v", unitPIDs, err)
	}
	var found []procscan.Proc
	waitFor(t, "both copies in /proc", 10*time.Second, func() bool {
		found, err = procscan.Scanner{}.Find([]string{"/usr/bin/" + name})
		if err != nil {
			t.Fatal(err)
		}
		return len(found) == 2
	})
	var inUnit, stray []procscan.Proc
	for _, p := range found {
		if p.InUnit([]string{unit}) {
			inUnit = append(inUnit, p)
		} else {
			stray = append(stray, p)
		}
	}
	t.Logf("unit's copy: %+v; hand-started: %+v", inUnit, stray)
	if len(inUnit) != 1 || inUnit[0].PID != unitPIDs[0] || len(stray) != 1 {
		t.Fatalf("in unit %+v (cgroup lists %v), outside %+v: want one each, the unit's being its cgroup's", inUnit, unitPIDs, stray)
	}
	if err := (procscan.Scanner{}).Signal(stray[0], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-handDone:
	case <-time.After(10 * time.Second):
		t.Fatal("hand-started copy survived SIGTERM")
	}
	if st := state(t, s, unit); st.ActiveState != "active" {
		t.Fatalf("the unit is %+v after the stray was stopped", st)
	}
}
