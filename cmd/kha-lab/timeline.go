package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

func init() {
	register("timeline", "print the measured timeline of a real-plane scenario from saved runs: timeline [--id 50] FILE.json...", runTimeline)
}

// runTimeline regenerates the timeline text (docs/failure-modes.md's
// opening section) from saved side-by-side results.
func runTimeline(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	id := fs.Int("id", 50, "scenario whose timeline to print")
	rest, err := parse("timeline", args, &fs)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		fmt.Fprintln(os.Stderr, "usage: kha-lab timeline [--id N] FILE.json...")
		return errUsage
	}
	var all []report.Result
	for _, a := range rest {
		b, err := os.ReadFile(a)
		if err != nil {
			return err
		}
		var rs []report.Result
		if err := json.Unmarshal(b, &rs); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		all = append(all, rs...)
	}
	return plane.WriteTimeline(os.Stdout, all, *id)
}
