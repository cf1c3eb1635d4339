package etcdconn

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"go.uber.org/zap/zapcore"
)

// slogCore hands the etcd client's zap entries to slog.Default(), so they
// come out in the daemon's own log format and destination.
type slogCore struct {
	zapcore.LevelEnabler
	attrs []slog.Attr
}

func newSlogCore(min zapcore.Level) zapcore.Core { return &slogCore{LevelEnabler: min} }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{LevelEnabler: c.LevelEnabler, attrs: append(append([]slog.Attr(nil), c.attrs...), toAttrs(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	attrs := append(append([]slog.Attr(nil), c.attrs...), toAttrs(fields)...)
	slog.Default().LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func toAttrs(fields []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	return attrs
}

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelError
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}
