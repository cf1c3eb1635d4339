package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/lab/scenario"
)

func init() {
	register("hooklog", "test hook program: append EVENT and the KHA_* environment to a log (hooklog --log FILE EVENT)", runHookLog)
	register("operator-docs", "write docs/operator-scenarios.md from saved runs of the operator scenarios (16-22)", runOperatorDocs)
}

// runHookLog is what kha-supervisor runs as on_promote, on_demote and
// on_fence in scenario 21: one line per call, stamped with the wall clock
// the witnesses use.
func runHookLog(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	log := fs.String("log", "/lab/hooks/hooks.log", "log file to append to")
	rest, err := parse("hooklog", args, &fs)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		fmt.Fprintln(os.Stderr, "usage: kha-lab hooklog [--log FILE] EVENT")
		return errUsage
	}
	ev, err := scenario.HookEventFromEnv(rest[0], os.Getenv, time.Now())
	if err != nil {
		return err
	}
	return scenario.AppendHookLine(*log, ev)
}

func runOperatorDocs(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	out := fs.String("out", "docs/operator-scenarios.md", "file to write")
	all := fs.Bool("all", false, "use every saved operator run, not only the latest")
	paths, err := parse("operator-docs", args, &fs)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		l, err := f.open()
		if err != nil {
			return err
		}
		if paths, err = savedReports(l, "operator"); err != nil {
			return err
		}
		if len(paths) == 0 {
			return fmt.Errorf("no saved operator runs in %s: run `kha-lab run operator` first", reportsDir(l))
		}
		if !*all {
			paths = paths[len(paths)-1:]
		}
	}
	reps, err := report.Load(paths...)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	md, err := os.Create(*out)
	if err != nil {
		return err
	}
	err = report.WriteOperatorDoc(md, report.OperatorDoc{Reports: reps, IDs: scenario.OperatorIDs(), HandoffRounds: scenario.HandoffRounds})
	if cerr := md.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s from %d run(s)\n", *out, len(paths))
	return nil
}
