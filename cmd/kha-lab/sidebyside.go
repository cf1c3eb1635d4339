package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/scenario"
)

func init() {
	register("sidebyside", "real plane: run faults per mode, judged at the apiservers and etcd (a front of `run --plane real`): sidebyside [--modes kha-fast,kha-default,le-tuned,le-defaults] [--repeat N] [ID...]", runSideBySide)
}

// runSideBySide is `kha-lab run --plane real` under its older name; without
// IDs it runs every real-plane scenario.
func runSideBySide(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	modes := fs.String("modes", "kha-fast", modesUsage)
	repeat := fs.Int("repeat", 1, "runs of every scenario in every mode")
	rest, err := parse("sidebyside", args, &fs)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		rest = []string{"real"}
	}
	ids, err := parseIDs(rest)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab sidebyside: %v\n", err)
		return errUsage
	}
	return runReal(ctx, f, *modes, *repeat, ids)
}

// layoutFits refuses scenarios whose fault is defined in another etcd
// layout than the lab's (plane.Spec.Layout).
func layoutFits(have string, ids []int) error {
	var wrong []string
	for _, id := range ids {
		if s, _ := scenario.RealSpec(id); s.Layout != "" && s.Layout != have {
			wrong = append(wrong, fmt.Sprintf("%d (%s)", id, s.Layout))
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("the lab's etcd layout is %s; scenarios %s need another (kha-lab down, then kha-lab up --plane real --etcd-layout LAYOUT)", have, strings.Join(wrong, ", "))
	}
	return nil
}

const modesUsage = "real plane: comma list of modes: kha-fast, kha-fast-kill, kha-default, le-tuned (5/3/1 s), le-defaults (15/10/2 s), le-L-R-P (seconds), the fenced kha-*-gate, kha-*-token, and kha-fast-etcd, kha-fast-kill-etcd (etcd_fence: etcd auth on, the old master's apiserver revoked at each takeover)"

// runReal runs real-plane scenarios ids in every mode of modes, repeat
// times, saving the results after every trial.
func runReal(ctx context.Context, f labFlags, modes string, repeat int, ids []int) error {
	ms, err := plane.ParseModes(modes)
	if err != nil || repeat < 1 {
		fmt.Fprintf(os.Stderr, "kha-lab run: %v (repeat %d)\n", err, repeat)
		return errUsage
	}
	for _, id := range ids {
		if _, ok := scenario.RealSpec(id); !ok {
			fmt.Fprintf(os.Stderr, "kha-lab run: scenario %d does not run on the real plane: want one of %v\n", id, scenario.RealIDs())
			return errUsage
		}
	}
	r, dir, err := openRunner(ctx, f)
	if err != nil {
		return err
	}
	if err := layoutFits(r.P.Lab.EtcdLayout(), ids); err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab run: %v\n", err)
		return errUsage
	}
	stamp := time.Now().UTC().Format("20060102T150405")
	// Saved after every trial: an interrupted run keeps what it measured.
	save := func(results []report.Result) error {
		return report.SaveTrials(filepath.Join(dir, "sidebyside-"+stamp+".json"), results)
	}
	var results []report.Result
	// Repeat by repeat, every mode in each: an interrupted run (the
	// machine is shared, a full matrix takes an hour) still has every
	// scenario in every mode for the repeats it finished. Each mode
	// switch costs a restart of the components, once per mode and repeat
	// (and once more for a scenario with its own layout, 48's balancer).
	for rep := 1; rep <= repeat; rep++ {
		for _, m := range ms {
			for _, id := range ids {
				s, _ := scenario.RealSpec(id)
				res := r.Run(ctx, s, m, rep)
				results = append(results, res)
				fmt.Printf("%d %s #%d: leader %s -> %s, scheduler %.0f ms, unbound %.0f ms, controller-manager %.0f ms, cold %.0f ms, overlaps %d, 409s %d, extra RS %d, late commits %d, ghost writes %d, exits %v, handoff %v, pass %v %s %s | %s\n",
					id, m.Name, rep, res.Leader, res.NewLeader, res.SchedMS, res.UnboundMS, res.CMMS, res.ColdMS, len(res.Overlaps), res.DoubleBind, res.ExtraRS, res.LateCommits, res.GhostWrites,
					res.Exits, res.Handoff, res.Pass, res.Finding, strings.Join(res.Problems, "; "), strings.Join(res.Notes, "; "))
				if err := save(results); err != nil {
					return err
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	tf, err := os.Create(filepath.Join(dir, "sidebyside-"+stamp+".md"))
	if err != nil {
		return err
	}
	defer tf.Close()
	plane.WriteTable(io.MultiWriter(os.Stdout, tf), results)
	fmt.Printf("saved %s/sidebyside-%s.{json,md}\n", dir, stamp)
	// A leader-election trial whose only fault is its finding (both
	// masters wrote) is what the comparison measures: it is in the table,
	// it does not fail the run.
	for _, res := range results {
		if res.LabFailure() {
			return fmt.Errorf("scenario %d in %s failed: %v %v", res.ID, res.Mode, res.Problems, res.Overlaps)
		}
	}
	return nil
}

// openRunner attaches to the lab that is up with the real plane and starts
// a runner (its prober); dir is where the runs are saved.
func openRunner(ctx context.Context, f labFlags) (r *plane.Runner, dir string, err error) {
	l, err := f.open()
	if err != nil {
		return nil, "", err
	}
	p, ok := planes[l]
	if !ok {
		return nil, "", errors.New("the lab does not run the real plane (kha-lab up --plane real)")
	}
	if err := l.Open(); err != nil {
		return nil, "", err
	}
	if r, err = plane.NewRunner(ctx, p); err != nil {
		return nil, "", err
	}
	dir = filepath.Join(l.OutDir(), "realplane")
	return r, dir, os.MkdirAll(dir, 0o755)
}

func init() {
	register("sidebyside-report", "print the side-by-side table of saved runs: sidebyside-report [--svg FILE] [--markdown] [--doc docs/failure-modes.md] FILE.json...", runSideBySideReport)
}

func runSideBySideReport(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sidebyside-report", flag.ContinueOnError)
	svg := fs.String("svg", "", "also draw the side-by-side into this SVG file")
	md := fs.Bool("markdown", false, "print the whole generated section of docs/failure-modes.md, not only the table")
	doc := fs.String("doc", "", "replace the side-by-side section of this document (docs/failure-modes.md) with the generated one")
	load := fs.String("load", "", "the machine's load during the run, in words, for the section's caveat (e.g. \"load average 30-55\")")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: kha-lab sidebyside-report [--svg FILE] [--markdown] [--doc FILE.md] FILE.json...")
		return errUsage
	}
	all, err := report.LoadTrials(fs.Args()...)
	if err != nil {
		return err
	}
	if *svg != "" {
		if err := writeFileWith(*svg, func(w io.Writer) error { return plane.WriteSVG(w, all) }); err != nil {
			return err
		}
	}
	if !*md && *doc == "" {
		plane.WriteTable(os.Stdout, all)
		return nil
	}
	var b bytes.Buffer
	rel := ""
	if *svg != "" {
		// The picture as the document links it.
		rel = *svg
		if *doc != "" {
			if r, err := filepath.Rel(filepath.Dir(*doc), *svg); err == nil {
				rel = r
			}
		}
	}
	if err := plane.WriteSection(&b, all, plane.SectionOptions{SVG: rel, Load: *load, Sources: baseNames(fs.Args()), Lookup: scenario.RealSpec}); err != nil {
		return err
	}
	if *doc == "" {
		_, err := os.Stdout.Write(b.Bytes())
		return err
	}
	old, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	out, err := plane.ReplaceSection(old, b.Bytes())
	if err != nil {
		return fmt.Errorf("%s: %w", *doc, err)
	}
	return os.WriteFile(*doc, out, 0o644)
}

func writeFileWith(path string, f func(io.Writer) error) error {
	var b bytes.Buffer
	if err := f(&b); err != nil {
		return err
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}
