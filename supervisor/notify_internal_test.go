package supervisor

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// A watchdog ping queued in time but still in the queue after the instant
// it carries (Deadline.PingBy) is dropped, not sent late: sent late it
// would promise a kill after the lease could lapse. Other messages, and
// pings without an instant, go out in order.
func TestNotifierDropsAPingPastItsInstant(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []string
	)
	n := newNotifier(func(msg string) { mu.Lock(); sent = append(sent, msg); mu.Unlock() }, slog.Default())
	now := time.Now()
	n.queue(note{msg: "STATUS=a"})
	n.queue(note{msg: "WATCHDOG=1", by: now.Add(-time.Millisecond)}) // its instant has passed
	n.queue(note{msg: "STATUS=b"})
	n.queue(note{msg: "WATCHDOG=1", by: now.Add(time.Hour)})
	n.queue(note{msg: "WATCHDOG=1"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := len(sent)
		mu.Unlock()
		if got >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []string{"STATUS=a", "STATUS=b", "WATCHDOG=1", "WATCHDOG=1"}
	if len(sent) != len(want) {
		t.Fatalf("sent %q, want %q", sent, want)
	}
	for i := range want {
		if sent[i] != want[i] {
			t.Fatalf("sent %q, want %q", sent, want)
		}
	}
}
