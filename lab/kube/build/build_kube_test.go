//go:build kube

package build

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRealBuild builds the pinned release into the lab's cache (10-20
// minutes on 2 cores the first time; a cache hit afterwards), then checks
// that a second Ensure builds nothing and that every binary reports the
// release. KHA_LAB_K8S_CACHE overrides the cache directory.
//
//	go test -tags kube -timeout 60m -run TestRealBuild ./lab/kube/build
func TestRealBuild(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("the real build needs the go command on PATH")
	}
	o := Options{CacheDir: os.Getenv("KHA_LAB_K8S_CACHE"), Progress: testWriter{t}, ProgressEvery: time.Minute}
	first, err := Ensure(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first Ensure: cached=%v, stamp %+v", first.Cached, first.Stamp)
	second, err := Ensure(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Cached {
		t.Error("second Ensure rebuilt what was cached")
	}
	for _, c := range Commands {
		out, err := exec.CommandContext(t.Context(), second.Path(c), "--version").CombinedOutput()
		if err != nil {
			t.Errorf("%s --version: %v\n%s", c, err, out)
			continue
		}
		if got := strings.TrimSpace(string(out)); got != "Kubernetes "+DefaultVersion {
			t.Errorf("%s --version = %q, want Kubernetes %s", c, got, DefaultVersion)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestUnknownReleaseFailsAtDownload asks the module proxy for a release that
// does not exist: the error names the download step and the kept log.
func TestUnknownReleaseFailsAtDownload(t *testing.T) {
	var out strings.Builder
	_, err := Ensure(t.Context(), Options{Version: "v1.99.99", CacheDir: t.TempDir(), Progress: &out})
	se, ok := err.(*StepError)
	if !ok || se.Step != "download" {
		t.Fatalf("Ensure error %v (%T), want a StepError at download\n%s", err, err, out.String())
	}
	log, rerr := os.ReadFile(se.Log)
	if rerr != nil || !strings.Contains(string(log), "v1.99.99") {
		t.Errorf("log %s (%v) does not show the failed download:\n%s", se.Log, rerr, log)
	}
	t.Logf("%v", err)
}
