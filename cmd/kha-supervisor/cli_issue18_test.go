package main

import (
	"context"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// completion with a shell it does not know is a usage error naming the
// shells it knows (cobra alone printed the help and exited 0).
func TestCompletionUnknownShell(t *testing.T) {
	code, out, errOut := runCmd(t, "completion", "tcsh")
	want := `kha-supervisor: unknown shell "tcsh" for "kha-supervisor completion"; supported shells: bash, fish, powershell, zsh`
	if code != exitConfig || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("completion tcsh: exit %d stdout %q stderr %q; want %d and %q", code, out, errOut, exitConfig, want)
	}
	if code, out, _ := runCmd(t, "completion", "bash"); code != exitOK || !strings.Contains(out, "bash completion") {
		t.Errorf("completion bash: exit %d", code)
	}
}

// A build without a release version names its commit, the commit's date
// and the tree's state from the Go build information.
func TestVersionWithoutRelease(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "892c32712345678901234567890abcdef0123456"},
		{Key: "vcs.time", Value: "2026-12-02T07:00:04Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got, want := describeVersion("dev", info), "dev (commit 892c32712345 (modified), committed 2026-12-02T07:00:04Z, go1.26.8)"; got != want {
		t.Errorf("describeVersion = %q, want %q", got, want)
	}
	if got := describeVersion("1.4.0", info); got != "1.4.0" {
		t.Errorf("a release version grew details: %q", got)
	}
	if got := describeVersion("dev", &debug.BuildInfo{GoVersion: "go1.26.8"}); got != "dev (go1.26.8)" {
		t.Errorf("without VCS information: %q", got)
	}
	if code, out, _ := runCmd(t, "version"); code != exitOK || !strings.HasPrefix(out, version) {
		t.Errorf("version: exit %d %q", code, out)
	}
}

// Every example in kha-supervisor(8) names a command and flags that exist.
func TestManExamplesParse(t *testing.T) {
	data, err := os.ReadFile("../../packaging/man/kha-supervisor.8.in")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i, j := strings.Index(text, ".SH EXAMPLES"), strings.Index(text, ".SH SEE ALSO")
	if i < 0 || j < i {
		t.Fatal("no EXAMPLES section")
	}
	n := 0
	for line := range strings.SplitSeq(text[i:j], "\n") {
		if !strings.HasPrefix(line, "kha-supervisor ") {
			continue
		}
		line = strings.ReplaceAll(line, `\-`, "-")
		line, _, _ = strings.Cut(line, ">")
		args := strings.Fields(strings.TrimPrefix(line, "kha-supervisor "))
		for k, a := range args { // one quoted --reason
			if strings.HasPrefix(a, `"`) {
				args = append(args[:k], "x")
				break
			}
		}
		root := newRoot(env{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard})
		c, rest, err := root.Find(args)
		if err != nil || c == root {
			t.Errorf("example %q: no such command: %v", line, err)
			continue
		}
		if err := c.ParseFlags(rest); err != nil {
			t.Errorf("example %q: %v", line, err)
		}
		n++
	}
	if n < 12 {
		t.Errorf("only %d examples; want the group commands too", n)
	}
}
