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
