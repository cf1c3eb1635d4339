package proc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestStartStop(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{
		Argv:    []string{"sleep", "300"},
		PIDFile: filepath.Join(dir, "run", "s.pid"),
		LogFile: filepath.Join(dir, "log", "s.log"),
	}
	id, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := Running(spec.PIDFile); !ok || got != id {
		t.Fatalf("Running = %v %v, want %v true", got, ok, id)
	}
	if _, err := Start(spec); err == nil {
		t.Fatalf("second Start over a live PID file must fail")
	}
	if err := Stop(context.Background(), spec.PIDFile, time.Second); err != nil {
		t.Fatal(err)
	}
	if Alive(id) {
		t.Fatalf("process %d still alive after Stop", id.PID)
	}
	if _, err := os.Stat(spec.PIDFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("PID file left behind: %v", err)
	}
	if err := Stop(context.Background(), spec.PIDFile, time.Second); err != nil {
		t.Fatalf("Stop of nothing must succeed: %v", err)
	}
}

// A term-ignoring process is killed after the grace period.
func TestStopEscalates(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{
		Argv:    []string{"sh", "-c", "trap '' TERM; while :; do sleep 1; done"},
		PIDFile: filepath.Join(dir, "t.pid"),
		LogFile: filepath.Join(dir, "t.log"),
	}
	id, err := Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	if err := Stop(context.Background(), spec.PIDFile, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if Alive(id) {
		t.Fatalf("process survived Stop")
	}
}

// A PID file naming a different incarnation (same PID, other start time) is
// never signalled.
func TestStaleIncarnationIgnored(t *testing.T) {
	dir := t.TempDir()
	self, err := Identify(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "stale.pid")
	if err := writePIDFile(path, ID{PID: self.PID, Start: self.Start + 1}); err != nil {
		t.Fatal(err)
	}
	if _, ok := Running(path); ok {
		t.Fatalf("a PID file with the wrong start time must not count as running")
	}
	if err := Signal(path, syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal on stale file = %v, want ErrProcessDone", err)
	}
	if err := Kill(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale PID file not removed")
	}
}
