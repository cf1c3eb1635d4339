package build

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRelease writes small stand-in binaries and a stamp recording their
// digests: the decision only reads files, so no real build is needed here.
func fakeRelease(t *testing.T, release string) string {
	t.Helper()
	dir := t.TempDir()
	s := Stamp{Version: release, GoVersion: "go1.26.8", Built: time.Now().UTC(), SHA256: map[string]string{}}
	for _, c := range Commands {
		p := filepath.Join(dir, c)
		if err := os.WriteFile(p, []byte("binary of "+c), 0o755); err != nil {
			t.Fatal(err)
		}
		sum, err := fileSHA256(p)
		if err != nil {
			t.Fatal(err)
		}
		s.SHA256[c] = sum
	}
	if err := writeStamp(dir, s); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDecideUsesAMatchingRelease(t *testing.T) {
	dir := fakeRelease(t, "v1.37.2")
	d, err := decide(dir, "v1.37.2")
	if err != nil || !d.Use {
		t.Fatalf("decide = %+v, %v; want use", d, err)
	}
	if d.Stamp.GoVersion != "go1.26.8" {
		t.Errorf("stamp go version %q", d.Stamp.GoVersion)
	}
}

func TestDecideRebuildsOnAnyDoubt(t *testing.T) {
	cases := map[string]struct {
		damage func(t *testing.T, dir string)
		reason string
	}{
		"no stamp": {func(t *testing.T, dir string) { rm(t, dir, stampName) }, "not built yet"},
		"empty dir": {func(t *testing.T, dir string) {
			for _, c := range append(Commands, stampName) {
				rm(t, dir, c)
			}
		}, "not built yet"},
		"corrupt stamp":  {func(t *testing.T, dir string) { write(t, dir, stampName, "{") }, "unreadable"},
		"other release":  {func(t *testing.T, dir string) { restamp(t, dir, func(s *Stamp) { s.Version = "v1.36.0" }) }, `"v1.36.0"`},
		"binary missing": {func(t *testing.T, dir string) { rm(t, dir, "kube-scheduler") }, "kube-scheduler is missing"},
		"binary changed": {func(t *testing.T, dir string) { write(t, dir, "kube-apiserver", "truncated") }, "kube-apiserver does not match"},
		"digest missing": {func(t *testing.T, dir string) {
			restamp(t, dir, func(s *Stamp) { delete(s.SHA256, "kube-controller-manager") })
		}, "no digest for kube-controller-manager"},
		"interrupted tmp": {func(t *testing.T, dir string) { rm(t, dir, stampName); write(t, dir, stampName+".tmp", "{}") }, "not built yet"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := fakeRelease(t, "v1.37.2")
			c.damage(t, dir)
			d, err := decide(dir, "v1.37.2")
			if err != nil {
				t.Fatal(err)
			}
			if d.Use || !strings.Contains(d.Reason, c.reason) {
				t.Errorf("decide = %+v; want rebuild because %q", d, c.reason)
			}
		})
	}
}

func TestDecideIgnoresTheGoVersion(t *testing.T) {
	dir := fakeRelease(t, "v1.37.2")
	restamp(t, dir, func(s *Stamp) { s.GoVersion = "go1.25.0" })
	if d, err := decide(dir, "v1.37.2"); err != nil || !d.Use {
		t.Errorf("decide = %+v, %v; a build by another Go is still the release", d, err)
	}
}

func TestLookupNamesWhatIsWrong(t *testing.T) {
	cache := t.TempDir()
	_, err := Lookup(cache, "v1.37.2")
	if err == nil || !strings.Contains(err.Error(), "not built yet") || !strings.Contains(err.Error(), "kube-build") {
		t.Errorf("Lookup of an empty cache: %v", err)
	}
	dir := fakeRelease(t, "v1.37.2")
	if err := os.Rename(dir, filepath.Join(cache, "v1.37.2")); err != nil {
		t.Fatal(err)
	}
	b, err := Lookup(cache, "v1.37.2")
	if err != nil || b.Path("kube-apiserver") != filepath.Join(cache, "v1.37.2", "kube-apiserver") {
		t.Errorf("Lookup = %+v, %v", b, err)
	}
}

func TestEnsureDoesNotBuildWhatIsCached(t *testing.T) {
	cache := t.TempDir()
	if err := os.Rename(fakeRelease(t, "v1.37.2"), filepath.Join(cache, "v1.37.2")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	// A go command that cannot run: any build step would fail.
	r, err := Ensure(t.Context(), Options{Version: "v1.37.2", CacheDir: cache, Go: "/nonexistent/go", Progress: &out})
	if err != nil || !r.Cached {
		t.Fatalf("Ensure = %+v, %v; want the cached release", r, err)
	}
	if !strings.Contains(out.String(), "nothing to do") {
		t.Errorf("progress %q", out.String())
	}
}

func TestEnsureNamesTheFailedStepAndKeepsTheLog(t *testing.T) {
	cache := t.TempDir()
	var out strings.Builder
	_, err := Ensure(t.Context(), Options{Version: "v1.37.2", CacheDir: cache, Go: "/nonexistent/go", Progress: &out})
	se, ok := err.(*StepError)
	if !ok {
		t.Fatalf("Ensure error %v (%T), want a *StepError", err, err)
	}
	if se.Step != "go-version" || se.Log == "" {
		t.Errorf("step %q log %q", se.Step, se.Log)
	}
	if _, err := os.Stat(se.Log); err != nil {
		t.Errorf("log not kept: %v", err)
	}
	if !strings.Contains(err.Error(), se.Log) {
		t.Errorf("error %q does not name the log", err)
	}
}

func TestEnsureRejectsBadOptions(t *testing.T) {
	for _, o := range []Options{{Version: "1.37"}, {CacheDir: "relative/dir"}} {
		if _, err := Ensure(t.Context(), o); err == nil {
			t.Errorf("Ensure(%+v) accepted", o)
		}
	}
}

func rm(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(dir, name)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}

func write(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func restamp(t *testing.T, dir string, edit func(*Stamp)) {
	t.Helper()
	d, err := decide(dir, "v1.37.2")
	if err != nil || !d.Use {
		t.Fatalf("restamp: %+v %v", d, err)
	}
	edit(&d.Stamp)
	if err := writeStamp(dir, d.Stamp); err != nil {
		t.Fatal(err)
	}
}
