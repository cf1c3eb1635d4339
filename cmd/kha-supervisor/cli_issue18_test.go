package main

import (
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
