package httpapi

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

type fenceSource struct {
	*fakeSource
	line string
}

func (f fenceSource) APIFenceLine() string { return f.line }

// TestHealthzShowsTheAPIFence: /healthz carries the API fence's line and
// still passes on a mismatch (it judges the loop).
func TestHealthzShowsTheAPIFence(t *testing.T) {
	line := "api_fence: mode token; the apiservers hold token 100, the elected term's is 101: MISMATCH"
	src := fenceSource{fakeSource: &fakeSource{tick: time.Now()}, line: line}
	code, body, _ := get(t, New(src, nil), "GET", "/healthz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ok: ") || !strings.Contains(body, line+"\n") {
		t.Errorf("healthz %d %q, want 200 with %q", code, body, line)
	}
	code, body, _ = get(t, New(&fakeSource{tick: time.Now()}, nil), "GET", "/healthz")
	if code != http.StatusOK || strings.Contains(body, "api_fence") {
		t.Errorf("without the fence: %d %q", code, body)
	}
}
