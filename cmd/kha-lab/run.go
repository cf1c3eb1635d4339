package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/scenario"
)

func init() {
	register("run", "run scenarios: run all (1-15) | run operator (16-22) | run issues (23-36) | run 1 4 5 [--repeat N]; real plane: run [--modes kha-fast,le-tuned] real | stacked | 40 41 (the lab up with --plane real; stacked: with --etcd-layout stacked too)", runRun)
	register("report", "print the Markdown report of saved runs (default: every matrix run; --latest)", runReport)
	register("soak", "random faults back to back: soak --duration 30m --seed 1 (real plane: soak --plane real --mode off|gate|token)", runSoak)
	register("list", "list the scenarios", runList)
}

func reportsDir(l *lab.Lab) string { return filepath.Join(l.OutDir(), "reports") }

func parseIDs(args []string) ([]int, error) {
	if len(args) == 1 && args[0] == "operator" {
		return scenario.OperatorIDs(), nil
	}
	if len(args) == 1 && args[0] == "issues" {
		return scenario.IssueIDs(), nil
	}
	if len(args) == 1 && args[0] == "real" {
		return scenario.RealIDs(), nil
	}
	if len(args) == 1 && args[0] == "stacked" {
		return scenario.StackedIDs(), nil
	}
	if len(args) == 1 && args[0] == "all" {
		var ids []int
		for _, s := range scenario.All {
			ids = append(ids, s.ID)
		}
		return ids, nil
	}
	var ids []int
	for _, a := range args {
		for _, f := range strings.Split(a, ",") {
			id, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("scenario %q: want a number or all", f)
			}
			if _, ok := scenario.Lookup(id); !ok {
				return nil, fmt.Errorf("no scenario %d", id)
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("name scenarios (numbers) or all")
	}
	return ids, nil
}

// onRealPlane says which lab runs ids: all on the real plane, or all on
// the stand-ins; a mix is refused.
func onRealPlane(ids []int) (bool, error) {
	var real, standIn []int
	for _, id := range ids {
		if s, _ := scenario.Lookup(id); s.OnRealPlane() {
			real = append(real, id)
		} else {
			standIn = append(standIn, id)
		}
	}
	if len(real) > 0 && len(standIn) > 0 {
		return false, fmt.Errorf("scenarios %v run on the real plane, %v on the stand-ins: run them apart", real, standIn)
	}
	return len(real) > 0, nil
}

func openEnv(ctx context.Context, f *labFlags) (*lab.Lab, *scenario.Env, error) {
	l, err := f.open()
	if err != nil {
		return nil, nil, err
	}
	env, err := scenario.Open(ctx, l, slog.Default())
	if err != nil {
		return nil, nil, err
	}
	return l, env, nil
}

func runRun(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	repeat := fs.Int("repeat", 1, "run every scenario this many times (for medians and spread)")
	modes := fs.String("modes", "kha-fast", modesUsage)
	rest, err := parse("run", args, &fs)
	if err != nil {
		return err
	}
	ids, err := parseIDs(rest)
	if err != nil {
		return err
	}
	if real, err := onRealPlane(ids); err != nil {
		return err
	} else if real {
		return runReal(ctx, f, *modes, *repeat, ids)
	}
	l, env, err := openEnv(ctx, &f)
	if err != nil {
		return err
	}
	defer env.Close()
	rep, path, err := env.RunMatrix(ctx, ids, *repeat, reportsDir(l))
	if rep != nil {
		report.WriteMarkdown(os.Stdout, []*report.Report{rep})
		fmt.Printf("\nreport: %s (and .md)\n", path)
	}
	if err != nil {
		return err
	}
	if !rep.Pass {
		return errors.New("some scenario failed or an overlap was found")
	}
	return nil
}

func savedReports(l *lab.Lab, kind string) ([]string, error) {
	paths, err := filepath.Glob(filepath.Join(reportsDir(l), kind+"-*.json"))
	sort.Strings(paths)
	return paths, err
}

func runReport(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	latest := fs.Bool("latest", false, "only the latest saved run")
	kind := fs.String("kind", "matrix", "matrix or soak")
	rest, err := parse("report", args, &fs)
	if err != nil {
		return err
	}
	paths := rest
	if len(paths) == 0 {
		l, err := f.open()
		if err != nil {
			return err
		}
		if paths, err = savedReports(l, *kind); err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no saved %s reports in %s", *kind, reportsDir(l))
		}
		if *latest {
			paths = paths[len(paths)-1:]
		}
	}
	reps, err := report.Load(paths...)
	if err != nil {
		return err
	}
	report.WriteMarkdown(os.Stdout, reps)
	for _, r := range reps {
		if !r.Pass {
			return errors.New("a reported run failed")
		}
	}
	return nil
}

func runSoak(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	d := fs.Duration("duration", 30*time.Minute, "how long to inject faults")
	seed := fs.Uint64("seed", 1, "random seed (the same seed draws the same faults)")
	mode := fs.String("mode", "off", "real plane only: api_fence.mode of the supervisors: off, gate or token")
	etcdFence := fs.Bool("etcd-fence", false, "real plane only: [etcd_fence] on (etcd auth, the old master's apiserver revoked at each takeover)")
	faults := fs.Int("faults", 0, "real plane only: stop after this many faults, or when --duration is over if that comes first (0: no count)")
	if _, err := parse("soak", args, &fs); err != nil {
		return err
	}
	if f.plane == lab.PlaneReal {
		return runRealSoak(ctx, f, realSoakLimits{*d, *faults}, *seed, *mode, *etcdFence)
	}
	if *etcdFence || *faults != 0 {
		fmt.Fprintln(os.Stderr, "kha-lab soak: --etcd-fence and --faults need --plane real (the stand-in plane has no apiservers and counts no faults)")
		return errUsage
	}
	l, env, err := openEnv(ctx, &f)
	if err != nil {
		return err
	}
	defer env.Close()
	rep, path, err := env.Soak(ctx, *d, *seed, reportsDir(l), os.Stdout)
	if rep != nil {
		fmt.Println()
		rep.Soak.WriteMarkdown(os.Stdout)
		fmt.Printf("\nreport: %s (and .md)\n", path)
	}
	if err != nil {
		return err
	}
	if !rep.Pass {
		return errors.New("the soak found an overlap or a failed scenario")
	}
	return nil
}

func runList(ctx context.Context, args []string) error {
	for _, s := range scenario.Tables() {
		fmt.Printf("%2d  %-26s %s\n      expected: %s\n", s.ID, s.Name, s.Fault, s.Expected)
	}
	return nil
}

func init() {
	register("docs", "write docs/failure-modes.md and its timeline picture from saved runs", runDocs)
}

func runDocs(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	out := fs.String("out", "docs", "directory to write failure-modes.md and failover-timeline.svg into")
	all := fs.Bool("all", false, "use every saved matrix run, not only the latest")
	defaults := fs.String("defaults", "", "saved matrix runs (comma list) with the default profile, shown as a section of their own")
	before := fs.String("before", "", "saved runs (comma list) of the same scenarios on the code before a fix, shown as a table of their own")
	rest, err := parse("docs", args, &fs)
	if err != nil {
		return err
	}
	l, err := f.open()
	if err != nil {
		return err
	}
	paths := rest
	if len(paths) == 0 {
		if paths, err = savedReports(l, "matrix"); err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no saved matrix runs in %s: run `kha-lab run all` first", reportsDir(l))
		}
		if !*all {
			paths = paths[len(paths)-1:]
		}
	}
	matrix, err := report.Load(paths...)
	if err != nil {
		return err
	}
	var soak *report.Report
	if sp, _ := savedReports(l, "soak"); len(sp) > 0 {
		s, err := report.Load(sp[len(sp)-1])
		if err != nil {
			return fmt.Errorf("the latest soak report: %w", err)
		}
		soak = s[0]
	}
	svg := ""
	if r, ok := report.FirstResult(matrix, 1); ok {
		ttl, err := time.ParseDuration(matrix[len(matrix)-1].Profile.TTL)
		if err != nil {
			return fmt.Errorf("profile TTL: %w", err)
		}
		svg = "failover-timeline.svg"
		fsvg, err := os.Create(filepath.Join(*out, svg))
		if err != nil {
			return err
		}
		if err := report.WriteTimelineSVG(fsvg, r, ttl); err != nil {
			fsvg.Close()
			return err
		}
		if err := fsvg.Close(); err != nil {
			return err
		}
	}
	md, err := os.Create(filepath.Join(*out, "failure-modes.md"))
	if err != nil {
		return err
	}
	var def []*report.Report
	if *defaults != "" {
		if def, err = report.Load(strings.Split(*defaults, ",")...); err != nil {
			return err
		}
	}
	var bef []*report.Report
	if *before != "" {
		if bef, err = report.Load(strings.Split(*before, ",")...); err != nil {
			return err
		}
	}
	err = report.WriteFailureModes(md, report.FailureModes{Matrix: matrix, Soak: soak, Defaults: def, Before: bef, SVG: svg, IssueIDs: scenario.IssueIDs()})
	if cerr := md.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s from %d run(s)\n", filepath.Join(*out, "failure-modes.md"), len(paths))
	return nil
}
