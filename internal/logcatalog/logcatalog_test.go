package logcatalog

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dynamicMessages are the calls whose message is built at run time, by file,
// with the row that documents them (CAPITALS for the variable parts).
var dynamicMessages = map[string]string{
	"cmd/kha-supervisor/reload.go": "reload: KEY changed but cannot change while running; restart kha-supervisor to apply it",
	"daemon/run.go":                "TIME DAEMON may slew the clock by N ppm (...), more than lease.clock_rate_error R (M ppm): ...",
}

var row = regexp.MustCompile("(?m)^\\| (ERROR|WARN) \\| `((?:[^`\\\\]|\\\\.)+)` \\| ([^|]|\\\\\\|)+\\| .+ \\|$")

func documented(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		out[m[1]+" "+strings.ReplaceAll(m[2], `\|`, "|")] = true
	}
	return out
}

// TestTroubleshootingCoversEveryMessage: docs/troubleshooting.md has a row for
// every ERROR and WARN message the product logs, and no row for a message it
// no longer logs.
func TestTroubleshootingCoversEveryMessage(t *testing.T) {
	msgs, dynamic, err := Scan(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) < 50 {
		t.Fatalf("only %d messages found: the scan is broken", len(msgs))
	}
	doc := documented(t)
	want := map[string]bool{}
	for _, m := range msgs {
		k := m.Level + " " + m.Text
		want[k] = true
		if !doc[k] {
			t.Errorf("docs/troubleshooting.md lacks a row for %s %q (logged at %s)", m.Level, m.Text, strings.Join(m.Where, ", "))
		}
	}
	for _, where := range dynamic {
		file := where[:strings.LastIndex(where, ":")]
		text, ok := dynamicMessages[file]
		if !ok {
			t.Errorf("%s logs a message built at run time: give it a row in docs/troubleshooting.md and an entry in dynamicMessages", where)
			continue
		}
		found := false
		for k := range doc {
			if strings.HasSuffix(k, " "+text) {
				found, want[k] = true, true
			}
		}
		if !found {
			t.Errorf("docs/troubleshooting.md lacks the row %q for %s", text, where)
		}
	}
	for k := range doc {
		if !want[k] {
			t.Errorf("docs/troubleshooting.md explains %q, which the code no longer logs", k)
		}
	}
}

func TestScanFindsLogCalls(t *testing.T) {
	dir := t.TempDir()
	src := `package p
func f(log L, ctx C, w string) {
	log.Error("one", "k", 1)
	log.Warn("two")
	log.WarnContext(ctx, "three", "a", "b")
	log.Warn(w)
	log.Warn("four", args...)
	http.Error(rw, "not a log", 400)
	errs.Error()
	log.Info("info is not listed")
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc g(){ log.Error(\"in a test\") }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	msgs, dynamic, err := Scan(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.Level+":"+m.Text)
	}
	if strings.Join(got, ",") != "WARN:four,ERROR:one,WARN:three,WARN:two" {
		t.Errorf("messages %v", got)
	}
	if len(dynamic) != 1 || dynamic[0] != "p.go:6" {
		t.Errorf("dynamic %v, want [p.go:6]", dynamic)
	}
}
