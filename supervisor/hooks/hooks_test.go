package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// TestMain makes the test process a child subreaper: the grandchildren that
// the kill tests orphan are reparented here instead of to PID 1 (which on
// some hosts never reaps them), so reapOrphans can leave no zombies behind.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "PR_SET_CHILD_SUBREAPER:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// reapOrphans reaps the zombie children of the test process. Tests here run
// one at a time, so once Run has returned no exec.Cmd is waiting for any of
// them: every zombie child is an orphaned hook descendant.
func reapOrphans(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == me && f[0] == "Z" {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err != nil {
				t.Errorf("reap orphan %d: %v", pid, err)
			}
		}
	}
}

// script writes an executable /bin/sh script into dir. The tests use sh to
// build fixtures; the runner itself never invokes a shell.
func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func runner(buf *bytes.Buffer) *Runner {
	var w io.Writer = io.Discard
	if buf != nil {
		w = buf
	}
	return &Runner{Logger: slog.New(slog.NewTextHandler(w, nil)), KillGrace: 300 * time.Millisecond}
}

func TestSuccessLogsOutput(t *testing.T) {
	testenv.RequireCommands(t, "sh")
	dir := t.TempDir()
	marker := filepath.Join(dir, "ran")
	p := script(t, dir, "ok.sh", `echo "promoting $KHA_NODE"; echo warn >&2; : > "$1"`)
	var logs bytes.Buffer
	if err := runner(&logs).Run(context.Background(), "on_promote", []string{p, marker},
		map[string]string{"KHA_NODE": "m1"}, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("hook did not run: %v", err)
	}
	for _, want := range []string{"hook succeeded", "hook=on_promote", "promoting m1", "warn"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

func TestEmptyArgvIsNoHook(t *testing.T) {
	if err := runner(nil).Run(context.Background(), "on_demote", nil, nil, time.Second); err != nil {
		t.Fatalf("empty argv: %v", err)
	}
}

func TestNonZeroExit(t *testing.T) {
	testenv.RequireCommands(t, "sh")
	dir := t.TempDir()
	p := script(t, dir, "fail.sh", "echo first line\necho 'cannot reach the load balancer' >&2\nexit 3\n")
	err := runner(nil).Run(context.Background(), "on_promote", []string{p}, nil, 10*time.Second)
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("err %v (%T), want *Error", err, err)
	}
	if he.ExitCode != 3 || he.TimedOut || he.Hook != "on_promote" {
		t.Fatalf("got %+v, want exit code 3, not timed out", he)
	}
	msg := err.Error()
	for _, want := range []string{"hook on_promote", p, "exit status 3", "first line | cannot reach the load balancer"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

func TestOutputIsBounded(t *testing.T) {
	testenv.RequireCommands(t, "sh")
	dir := t.TempDir()
	// 20000 lines of 10 bytes, then a final marker; only the tail is kept.
	p := script(t, dir, "loud.sh", "i=0; while [ $i -lt 20000 ]; do echo 123456789; i=$((i+1)); done; echo THE-END; exit 1\n")
	r := runner(nil)
	r.OutputMax = 1000
	err := r.Run(context.Background(), "on_demote", []string{p}, nil, 60*time.Second)
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("err %v, want *Error", err)
	}
	if len(he.Output) > 1000+3 || !strings.HasPrefix(he.Output, "...") || !strings.HasSuffix(he.Output, "THE-END\n") {
		t.Fatalf("output tail of %d bytes: %q...%q", len(he.Output), he.Output[:min(20, len(he.Output))], he.Output[max(0, len(he.Output)-20):])
	}
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %s: %v", path, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid file %s never written", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTimeoutKillsGroup(t *testing.T) {
	testenv.RequireCommands(t, "sh", "sleep")
	dir := t.TempDir()
	childPID := filepath.Join(dir, "child.pid")
	grandPID := filepath.Join(dir, "grandchild.pid")
	// The hook ignores SIGTERM, starts a grandchild that ignores it too and
	// keeps the output pipe open, and then sleeps; only SIGKILL to the whole
	// group ends both.
	p := script(t, dir, "stuck.sh", `trap '' TERM
echo $$ > "$1.tmp" && mv "$1.tmp" "$1"
sh -c 'trap "" TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 1; done' "$2" &
echo started
while :; do sleep 1; done
`)
	var logs bytes.Buffer
	start := time.Now()
	err := runner(&logs).Run(context.Background(), "on_fence", []string{p, childPID, grandPID}, nil, 700*time.Millisecond)
	elapsed := time.Since(start)
	var he *Error
	if !errors.As(err, &he) || !he.TimedOut || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a timed-out *Error wrapping DeadlineExceeded", err)
	}
	if !strings.Contains(he.Output, "started") {
		t.Errorf("output before the kill was lost: %q", he.Output)
	}
	child, grand := readPID(t, childPID), readPID(t, grandPID)
	// Run returns only once the group is gone: no polling here.
	if pidAlive(child) {
		t.Errorf("hook process %d still alive after Run returned", child)
	}
	if pidAlive(grand) {
		t.Errorf("grandchild %d still alive after Run returned", grand)
	}
	reapOrphans(t)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", grand)); err == nil {
		t.Errorf("grandchild %d was not reaped", grand)
	}
	if !strings.Contains(logs.String(), "killing its process group") {
		t.Errorf("no kill logged:\n%s", logs.String())
	}
	t.Logf("timeout 700ms, grace 300ms: Run returned after %v", elapsed)
}

func TestCancelKillsGroup(t *testing.T) {
	testenv.RequireCommands(t, "sh", "sleep")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "hook.pid")
	p := script(t, dir, "slow.sh", "echo $$ > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\nexec sleep 60\n")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- runner(nil).Run(ctx, "on_demote", []string{p, pidFile}, nil, time.Minute) }()
	pid := readPID(t, pidFile)
	cancel()
	err := <-errc
	var he *Error
	if !errors.As(err, &he) || !he.TimedOut || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want a killed *Error wrapping Canceled", err)
	}
	if pidAlive(pid) {
		t.Fatalf("hook %d alive after cancel", pid)
	}
}

func TestLeftoverChildrenAreKilled(t *testing.T) {
	testenv.RequireCommands(t, "sh", "sleep")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "bg.pid")
	// Exits 0 at once, leaving a background child holding stdout.
	p := script(t, dir, "bg.sh", "sleep 60 &\necho $! > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\nexit 0\n")
	if err := runner(nil).Run(context.Background(), "on_promote", []string{p, pidFile}, nil, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	pid := readPID(t, pidFile)
	if pidAlive(pid) {
		t.Fatalf("background child %d of a finished hook is still alive", pid)
	}
	reapOrphans(t)
}

func TestEnvironment(t *testing.T) {
	testenv.RequireCommands(t, "sh", "env", "sort")
	t.Setenv("KHA_LEAKED", "from the daemon")
	t.Setenv("SECRET_FROM_DAEMON", "x")
	dir := t.TempDir()
	out := filepath.Join(dir, "env.out")
	p := script(t, dir, "env.sh", `env | sort > "$1"`)
	env := map[string]string{
		"KHA_NODE": "m1", "KHA_CLUSTER": "prod", "KHA_ROLE": "active", "KHA_FENCING_TOKEN": "1234",
		"KHA_ODD": "a b $(x) 'q'",
	}
	if err := runner(nil).Run(context.Background(), "on_promote", []string{p, out}, env, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	for k, v := range env {
		if got[k] != v {
			t.Errorf("%s = %q in the hook, want %q", k, got[k], v)
		}
	}
	if got["PATH"] != Path {
		t.Errorf("PATH = %q, want %q", got["PATH"], Path)
	}
	for _, k := range []string{"KHA_LEAKED", "SECRET_FROM_DAEMON", "HOME"} {
		if _, ok := got[k]; ok {
			t.Errorf("%s leaked from the daemon's environment", k)
		}
	}
}

func TestEnvironmentRefused(t *testing.T) {
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/tmp/x.so"},
		{"KHA_BAD-NAME": "1"},
		{"KHA_NUL": "a\x00b"},
	} {
		err := runner(nil).Run(context.Background(), "on_promote", []string{"/bin/true"}, env, time.Second)
		var he *Error
		if !errors.As(err, &he) || he.ExitCode != -1 {
			t.Errorf("env %q: %v, want a refusal before running", env, err)
		}
	}
}

func TestArgvIsLiteral(t *testing.T) {
	testenv.RequireCommands(t, "sh")
	dir := t.TempDir()
	pwned := filepath.Join(dir, "pwned")
	out := filepath.Join(dir, "args.out")
	// Prints each argument on its own line, as received.
	p := script(t, dir, "args.sh", `out="$1"; shift; for a in "$@"; do printf '%s\n' "$a"; done > "$out"`)
	args := []string{
		"$(touch " + pwned + ")",
		"`touch " + pwned + "`",
		"two words",
		"semi; touch " + pwned,
		"*",
		"'quoted'",
		"$HOME",
	}
	argv := append([]string{p, out}, args...)
	if err := runner(nil).Run(context.Background(), "on_promote", argv, nil, 10*time.Second); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := os.Stat(pwned); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an argument was executed by a shell (%s exists: %v)", pwned, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), strings.Join(args, "\n")+"\n"; got != want {
		t.Fatalf("hook received\n%q\nwant\n%q", got, want)
	}
}

func TestProgramLookup(t *testing.T) {
	testenv.RequireCommands(t, "true")
	if err := runner(nil).Run(context.Background(), "on_promote", []string{"true"}, nil, 10*time.Second); err != nil {
		t.Fatalf("bare name on the standard PATH: %v", err)
	}
	err := runner(nil).Run(context.Background(), "on_promote", []string{"kha-no-such-hook-program"}, nil, time.Second)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing program: %v", err)
	}
	dir := t.TempDir()
	err = runner(nil).Run(context.Background(), "on_promote", []string{filepath.Join(dir, "absent")}, nil, time.Second)
	var he *Error
	if !errors.As(err, &he) || he.ExitCode != -1 || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent absolute path: %v", err)
	}
	if err := runner(nil).Run(context.Background(), "on_promote", []string{"/bin/true"}, nil, 0); err == nil {
		t.Fatal("zero timeout accepted")
	}
	marker := filepath.Join(dir, "ran")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = runner(nil).Run(ctx, "on_promote", []string{"/usr/bin/touch", marker}, nil, time.Second)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, want Canceled", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("hook ran with a cancelled context (%v)", err)
	}
}
