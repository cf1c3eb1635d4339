package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/scenario"
)

// soakModes maps --mode to api_fence.mode.
var soakModes = map[string]string{"off": "", "gate": plane.FenceGate, "token": plane.FenceToken}

// realSoakLimits end a real-plane soak: --duration, and --faults if set.
type realSoakLimits struct {
	duration time.Duration
	faults   int
}

// runRealSoak is `kha-lab soak --plane real`: random real-plane faults
// (plane.Runner.Soak), every trial's etcd case kept while it runs and
// removed when it passed; a failed one keeps its case, the run's
// results and the seed.
func runRealSoak(ctx context.Context, f labFlags, limits realSoakLimits, seed uint64, modeName string, etcdFence bool) error {
	fence, ok := soakModes[modeName]
	if !ok || limits.duration <= 0 || limits.faults < 0 {
		fmt.Fprintf(os.Stderr, "kha-lab soak: --mode %q: want off, gate or token; --duration %s: want > 0; --faults %d: want >= 0\n", modeName, limits.duration, limits.faults)
		return errUsage
	}
	// The real plane installs each mode's profile itself: --profile names
	// the soak's, whatever up chose (the default).
	name := f.profile
	f.profile = ""
	if name == "" {
		l, err := f.open()
		if err != nil {
			return err
		}
		name = l.Profile().Name
	}
	profile, err := lab.ProfileByName(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab soak: --profile: %v\n", err)
		return errUsage
	}
	mode := plane.KhaMode(profile)
	if fence != "" {
		mode = plane.FencedMode(profile, fence)
	}
	replay := "--mode " + modeName
	if limits.faults > 0 {
		replay += fmt.Sprintf(" --faults %d", limits.faults)
	}
	if etcdFence {
		mode = plane.WithEtcdFence(mode)
		modeName += "-etcd"
		replay += " --etcd-fence"
	}
	r, dir, err := openRunner(ctx, f)
	if err != nil {
		return err
	}
	if err := layoutFits(r.P.Lab.EtcdLayout(), plane.SoakFaults); err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab soak: the soak's faults: %v\n", err)
		return errUsage
	}
	stamp := time.Now().UTC().Format("20060102T150405")
	base := filepath.Join(dir, fmt.Sprintf("soak-%s-%s-seed%d", stamp, modeName, seed))
	cases := base + "-cases"
	if err := os.Setenv(plane.KeepCommitsEnv, cases); err != nil {
		return err
	}
	fmt.Printf("soak: seed %d (replay: kha-lab soak --plane real %s --seed %d), results in %s.json\n", seed, replay, seed, base)
	o := plane.SoakOptions{Duration: limits.duration, Count: limits.faults, Seed: seed, Mode: mode, Progress: os.Stdout, Lookup: scenario.RealSpec,
		Save: func(rs []report.Result) error {
			dropPassedCases(rs)
			return report.SaveTrials(base+".json", rs)
		}}
	results, err := r.Soak(ctx, o)
	var end []string
	if err == nil {
		end = r.EndCheck(ctx, mode)
	}
	var sum bytes.Buffer
	plane.SoakSummary(&sum, seed, mode.Name, results, end)
	_, _ = io.Copy(os.Stdout, bytes.NewReader(sum.Bytes()))
	if werr := os.WriteFile(base+".md", sum.Bytes(), 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	for _, res := range results {
		if !res.Pass {
			return fmt.Errorf("the soak failed (seed %d): see %s.md and the kept cases in %s", seed, base, cases)
		}
	}
	if len(end) > 0 {
		return errors.New("the soak ended without one leader running every unit alone: " + strings.Join(end, "; "))
	}
	return nil
}

// dropPassedCases removes the etcd judge's case of every passed trial
// (each result names its case in a note).
func dropPassedCases(rs []report.Result) {
	for _, res := range rs {
		if !res.Pass {
			continue
		}
		for _, n := range res.Notes {
			if p, ok := strings.CutPrefix(n, "etcd judge: case kept in "); ok {
				_ = os.Remove(p)
			}
		}
	}
}
