// Package build compiles the real Kubernetes control plane the lab runs
// (kube-apiserver, kube-scheduler, kube-controller-manager of one pinned
// release) from the Go module proxy, once, into a cache outside the source
// tree keyed by release.
//
// k8s.io/kubernetes is not meant to be required as a module: its go.mod
// requires every staging module (k8s.io/api, k8s.io/client-go, ...) at
// v0.0.0 and replaces each with a directory of its own tree, and a
// dependency's replace directives do not apply. So the build generates a
// small module of its own that requires k8s.io/kubernetes at the release and
// replaces each of those v0.0.0 requirements with the staging module's
// published version (v0.37.2 for v1.37.2).
package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// DefaultVersion is the release the lab pins.
const DefaultVersion = "v1.37.2"

// Options configure Ensure.
type Options struct {
	Version  string    // Kubernetes release; DefaultVersion if empty
	CacheDir string    // DefaultCacheDir if empty
	Go       string    // go command; "go" if empty
	Progress io.Writer // progress lines; io.Discard if nil
	// ProgressEvery is the interval of the build's progress lines; 15 s if 0.
	ProgressEvery time.Duration
}

// Result is what Ensure provides.
type Result struct {
	Binaries
	Cached bool // true: nothing was built
	Stamp  Stamp
}

// StepError names the build step that failed and the log that shows why.
type StepError struct {
	Step string
	Log  string
	Err  error
}

func (e *StepError) Error() string {
	if e.Log == "" {
		return fmt.Sprintf("step %s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("step %s: %v (log kept in %s)", e.Step, e.Err, e.Log)
}

func (e *StepError) Unwrap() error { return e.Err }

// Validate rejects a version that is not a release tag and a relative
// cache directory (the cache must not depend on where the lab is run).
func (o Options) Validate() error {
	if o.Version != "" {
		if _, err := StagingVersion(o.Version); err != nil {
			return err
		}
	}
	if o.CacheDir != "" && !filepath.IsAbs(o.CacheDir) {
		return fmt.Errorf("cache directory %q is not an absolute path", o.CacheDir)
	}
	return nil
}

func (o *Options) defaults() error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 15 * time.Second
	}
	return nil
}

// Lookup returns the cached binaries of a release without building; an
// error says why they cannot be used (not built, damaged).
func Lookup(cacheDir, release string) (Binaries, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	dir := ReleaseDir(cacheDir, release)
	d, err := decide(dir, release)
	if err != nil {
		return Binaries{}, err
	}
	if !d.Use {
		return Binaries{}, fmt.Errorf("kubernetes %s in %s: %s (run kha-lab kube-build)", release, cacheDir, d.Reason)
	}
	return Binaries{Dir: dir, Version: release}, nil
}

// Ensure returns the release's binaries, building them first unless the
// cache already holds them. Concurrent callers (two lab commands) serialise
// on a lock file; the second finds the first's build.
func Ensure(ctx context.Context, o Options) (Result, error) {
	if err := o.defaults(); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(o.CacheDir, 0o755); err != nil {
		return Result{}, fmt.Errorf("cache directory: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(o.CacheDir, ".lock"), o.Progress)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	dir := ReleaseDir(o.CacheDir, o.Version)
	d, err := decide(dir, o.Version)
	if err != nil {
		return Result{}, err
	}
	if d.Use {
		fmt.Fprintf(o.Progress, "kube-build: kubernetes %s cached in %s (built %s with %s in %s); nothing to do\n",
			o.Version, dir, d.Stamp.Built.Format(time.RFC3339), d.Stamp.GoVersion, d.Stamp.BuildTime)
		return Result{Binaries: Binaries{Dir: dir, Version: o.Version}, Cached: true, Stamp: d.Stamp}, nil
	}
	fmt.Fprintf(o.Progress, "kube-build: building kubernetes %s (%s); about 10-20 minutes on 2 cores\n", o.Version, d.Reason)
	s, err := newBuilder(o).run(ctx)
	if err != nil {
		return Result{}, err
	}
	return Result{Binaries: Binaries{Dir: dir, Version: o.Version}, Stamp: s}, nil
}

// lock takes an exclusive flock on path, waiting for a concurrent build.
func lock(ctx context.Context, path string, progress io.Writer) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !said {
			fmt.Fprintf(progress, "kube-build: waiting for another build holding %s\n", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}
