package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestJournalHandlerPriorities: on the journal every line carries its
// priority prefix and no timestamp of its own, for both formats, also
// through With and WithGroup, and the level changes in place.
func TestJournalHandlerPriorities(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		lvl := new(slog.LevelVar)
		log := slog.New(newHandler(&buf, format, lvl, true)).With("node", "m1")
		log.Debug("hidden")
		log.Info("registered")
		log.Warn("renewal late")
		log.WithGroup("g").Error("fenced", "reason", "deadline", "time", "kept")
		lvl.Set(slog.LevelDebug)
		log.Debug("now visible")
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		want := []struct{ prefix, msg string }{
			{"<6>", "registered"}, {"<4>", "renewal late"}, {"<3>", "fenced"}, {"<7>", "now visible"},
		}
		if len(lines) != len(want) {
			t.Fatalf("%s: %d lines, want %d:\n%s", format, len(lines), len(want), buf.String())
		}
		for i, w := range want {
			if !strings.HasPrefix(lines[i], w.prefix) || !strings.Contains(lines[i], w.msg) || !strings.Contains(lines[i], "m1") {
				t.Errorf("%s line %d = %q, want prefix %s, %q and the node", format, i, lines[i], w.prefix, w.msg)
			}
			if body := strings.TrimPrefix(lines[i], w.prefix); !strings.HasPrefix(body, "level=") && !strings.HasPrefix(body, `{"level":`) {
				t.Errorf("%s line %d = %q: carries a timestamp, journald has its own", format, i, lines[i])
			}
		}
		if !strings.Contains(lines[2], "kept") {
			t.Errorf("%s: a grouped attribute named time was dropped: %q", format, lines[2])
		}
	}
}

// TestPlainHandlerOutsideTheJournal: a terminal or a file gets the usual
// lines, with their time and without prefixes.
func TestPlainHandlerOutsideTheJournal(t *testing.T) {
	var buf bytes.Buffer
	slog.New(newHandler(&buf, "text", slog.LevelInfo, false)).Error("fenced")
	if s := buf.String(); strings.HasPrefix(s, "<") || !strings.HasPrefix(s, "time=") {
		t.Fatalf("outside the journal: %q", s)
	}
}

// TestIsJournalStream: JOURNAL_STREAM must name stderr itself.
func TestIsJournalStream(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	own := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, tc := range []struct {
		env  string
		want bool
	}{{own, true}, {"", false}, {fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), false}, {"garbage", false}} {
		if got := isJournalStream(f, tc.env); got != tc.want {
			t.Errorf("JOURNAL_STREAM=%q: %v, want %v", tc.env, got, tc.want)
		}
	}
	if isJournalStream(&bytes.Buffer{}, own) {
		t.Error("a buffer counted as the journal")
	}
}
