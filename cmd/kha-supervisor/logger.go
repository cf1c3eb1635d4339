package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// logLevel is the daemon's log level, shared with the reloader so that
// SIGHUP can change log.level in place.
var logLevel slog.LevelVar

// newLogger builds the daemon's logger at logLevel. When stderr is the journal
// (systemd sets JOURNAL_STREAM to its device and inode), each line starts
// with the sd-daemon priority prefix ("<3>" for errors) and carries no
// timestamp of its own: journald stamps every line, and the prefix is what
// makes `journalctl -p err` find the fences.
func newLogger(e env, c config.Log) *slog.Logger {
	return newLoggerAt(e.stderr, c, &logLevel)
}

func newLoggerAt(w io.Writer, c config.Log, level *slog.LevelVar) *slog.Logger {
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config.Load
	journal := isJournalStream(w, os.Getenv("JOURNAL_STREAM"))
	return slog.New(newHandler(w, c.Format, level, journal))
}

func newHandler(w io.Writer, format string, level slog.Leveler, journal bool) slog.Handler {
	opts := &slog.HandlerOptions{Level: level}
	if !journal {
		if format == "json" {
			return slog.NewJSONHandler(w, opts)
		}
		return slog.NewTextHandler(w, opts)
	}
	opts.ReplaceAttr = dropTime
	pw := &prefixWriter{w: w}
	var inner slog.Handler
	if format == "json" {
		inner = slog.NewJSONHandler(pw, opts)
	} else {
		inner = slog.NewTextHandler(pw, opts)
	}
	return &journalHandler{inner: inner, pw: pw}
}

// dropTime removes the record's own time (top level only: a "time" attribute
// inside a group is data).
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// isJournalStream reports whether w is the stream journald handed us:
// JOURNAL_STREAM names the device and inode of the socket, and only if w is
// that very file (not a pipe a parent put in between) do the prefixes mean
// anything to the reader.
func isJournalStream(w io.Writer, env string) bool {
	f, ok := w.(*os.File)
	if !ok || env == "" {
		return false
	}
	fi, err := f.Stat() // not Fd(): that would switch stderr to blocking mode
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && env == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// priority maps a slog level to a syslog priority (sd-daemon(3)).
func priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return 3 // err
	case l >= slog.LevelWarn:
		return 4 // warning
	case l >= slog.LevelInfo:
		return 6 // info
	default:
		return 7 // debug
	}
}

// prefixWriter puts the current record's priority before each line. The
// built-in handlers write one record with one Write call, and their text
// escapes newlines, so a record is one line.
type prefixWriter struct {
	mu   sync.Mutex // held by journalHandler.Handle around the inner handler's Write
	w    io.Writer
	prio int
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var sb strings.Builder
	for line := range strings.Lines(string(b)) {
		fmt.Fprintf(&sb, "<%d>%s", p.prio, line)
	}
	if _, err := io.WriteString(p.w, sb.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// journalHandler tells the prefixWriter the level of the record the inner
// handler is about to write.
type journalHandler struct {
	inner slog.Handler
	pw    *prefixWriter
}

func (h *journalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *journalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.prio = priority(r.Level)
	return h.inner.Handle(ctx, r)
}

func (h *journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &journalHandler{inner: h.inner.WithAttrs(as), pw: h.pw}
}

func (h *journalHandler) WithGroup(name string) slog.Handler {
	return &journalHandler{inner: h.inner.WithGroup(name), pw: h.pw}
}
