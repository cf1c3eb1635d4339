package etcdconn_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// TestClientLogsGoToSlog checks the etcd client's logger: errors reach
// slog.Default() with their fields, anything below error is dropped.
func TestClientLogsGoToSlog(t *testing.T) {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	e := config.Default().Etcd
	e.Endpoints = []string{"http://127.0.0.1:2379"}
	cc, err := etcdconn.ClientConfig(e)
	if err != nil {
		t.Fatal(err)
	}
	cc.Logger.Info("chatty", zap.String("x", "1"))
	cc.Logger.Warn("still chatty")
	cc.Logger.Error("lost connection", zap.String("endpoint", "e1"), zap.Int("attempt", 3))
	out := buf.String()
	if strings.Contains(out, "chatty") {
		t.Errorf("below-error entries were logged: %s", out)
	}
	for _, want := range []string{"level=ERROR", `msg="lost connection"`, "endpoint=e1", "attempt=3", "component=etcd-client"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}
