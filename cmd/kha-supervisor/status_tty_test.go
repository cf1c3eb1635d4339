package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
)

// openPTY opens a pseudo-terminal pair: the controlling side to read what
// the command draws, the terminal side to give it as stdout.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the terminal side: %v", err)
	}
	t.Cleanup(func() { _ = tty.Close() })
	return ptmx, tty
}

// TestStatusWatchRedrawsOnTerminal (issue 18 item 9): on a terminal,
// status --watch redraws in place — every frame starts by moving the
// cursor home and clearing the screen — instead of scrolling; the
// pipe case (no redraw) is TestStatusWatchSaysEtcdDoesNotAnswer's.
func TestStatusWatchRedrawsOnTerminal(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	supervisortest.LeaderOf(t, w.Start("m1", nil))
	ptmx, tty := openPTY(t)
	var screen syncBuffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- dispatch(env{ctx: ctx, stdout: tty, stderr: tty, getenv: func(string) string { return "" }},
			[]string{"status", "--watch", "--interval", "200ms", "--endpoints", w.Cluster.Endpoints()[0], "--cluster", "test"})
	}()
	const clear = "\x1b[H\x1b[2J"
	supervisortest.WaitFor(t, "three frames on the terminal", 15*time.Second, func() bool {
		return strings.Count(screen.String(), clear) >= 3
	})
	cancel()
	if code := <-done; code != exitOK {
		t.Errorf("status --watch ended with %d after the interrupt, want %d", code, exitOK)
	}
	frames := strings.Split(screen.String(), clear)
	if frames[0] != "" {
		t.Errorf("output before the first redraw: %q", frames[0])
	}
	for i, f := range frames[1 : len(frames)-1] {
		if !strings.Contains(f, "leader m1") {
			t.Errorf("frame %d does not show the leader: %q", i+1, f)
		}
	}
}
