package witness

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as a witness process for the signal tests.
func TestMain(m *testing.M) {
	if dir := os.Getenv("WITNESS_TEST_DIR"); dir != "" {
		err := Main(Options{Node: "n", Unit: "u", Dir: dir, FaultDir: os.Getenv("WITNESS_TEST_FAULTS")})
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunWritesHeartbeats(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := Run(ctx, Options{Node: "m1", Unit: "kube-scheduler", Dir: dir}); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	l := read(t, dir)
	in := l.Instances()
	if len(in) != 1 {
		t.Fatalf("instances = %+v, want 1", in)
	}
	i := in[0]
	if i.Node != "m1" || i.Unit != "kube-scheduler" || i.PID != os.Getpid() {
		t.Fatalf("instance %+v", i.Key)
	}
	if i.First.Before(start) || i.Last.After(end) || i.Beats < 3 {
		t.Fatalf("beats %d from %v to %v outside the run %v..%v", i.Beats, i.First, i.Last, start, end)
	}
}

func TestCrashAfter(t *testing.T) {
	err := Run(context.Background(), Options{Node: "m1", Unit: "u", Dir: t.TempDir(), CrashAfter: 50 * time.Millisecond})
	if err == nil {
		t.Fatalf("CrashAfter must end the witness with an error")
	}
}

func startWitness(t *testing.T, ignore bool) (*exec.Cmd, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "WITNESS_TEST_DIR="+dir)
	if ignore {
		// Through the fault file, as the lab injects it.
		faults := t.TempDir()
		if err := os.WriteFile(FaultFile(faults, "n", "u"), FormatFault(true, 0), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "WITNESS_TEST_FAULTS="+faults)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Wait for the first beat so the signal handler is installed.
	for i := 0; ; i++ {
		if st, err := os.Stat(filepath.Join(dir, FileName("n", "u"))); err == nil && st.Size() > 0 {
			break
		}
		if i > 500 {
			t.Fatalf("witness wrote nothing")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cmd, dir
}

func TestTermEnds(t *testing.T) {
	cmd, _ := startWitness(t, false)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("SIGTERM must end the witness cleanly: %v", err)
	}
}

func TestIgnoreTerm(t *testing.T) {
	cmd, dir := startWitness(t, true)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	time.Sleep(300 * time.Millisecond)
	l := read(t, dir)
	last, ok := l.LastEnd("n", "u")
	// Beating well after the signal: one beat written before the signal
	// was handled cannot pass for it.
	if !ok || !last.After(sent.Add(200*time.Millisecond)) {
		t.Fatalf("witness told to ignore SIGTERM stopped beating (last %v, TERM at %v)", last, sent)
	}
	_ = cmd.Process.Kill()
	if err := cmd.Wait(); err == nil {
		t.Fatalf("SIGKILL must end it with a non-zero status")
	}
}

func TestFaultFile(t *testing.T) {
	dir := t.TempDir()
	o := Options{Node: "m1", Unit: "u", FaultDir: dir}
	if err := applyFaultFile(&o); err != nil || o.IgnoreTerm || o.CrashAfter != 0 {
		t.Fatalf("no file: %+v %v", o, err)
	}
	if err := os.WriteFile(FaultFile(dir, "m1", "u"), FormatFault(true, 300*time.Millisecond), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyFaultFile(&o); err != nil || !o.IgnoreTerm || o.CrashAfter != 300*time.Millisecond {
		t.Fatalf("with file: %+v %v", o, err)
	}
	if err := os.WriteFile(FaultFile(dir, "m1", "u"), []byte("explode\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := applyFaultFile(&o); err == nil {
		t.Fatalf("an unknown setting must be refused")
	}
}
