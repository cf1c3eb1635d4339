package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

func init() {
	register("cost", "real plane: both supervisors' RSS and CPU per kha mode over a steady window (--modes kha-fast,kha-fast-gate,kha-fast-token --window 60s)", runCost)
}

func runCost(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	var f labFlags
	f.register(&fs)
	modes := fs.String("modes", "kha-fast,kha-fast-gate,kha-fast-token", "comma list of kha modes")
	settle := fs.Duration("settle", 15*time.Second, "wait after the plane is steady before sampling")
	window := fs.Duration("window", time.Minute, "sampling window (one sample a second)")
	rest, err := parse("cost", args, &fs)
	if err != nil {
		return err
	}
	ms, err := plane.ParseModes(*modes)
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	if err == nil && (*window < time.Second || *settle < 0) {
		err = fmt.Errorf("--window %s, --settle %s: want a window of at least 1s and a settle of at least 0", *window, *settle)
	}
	for _, m := range ms {
		if err == nil && m.LeaderElect {
			err = fmt.Errorf("mode %s runs no supervisor", m.Name)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab cost: %v\n", err)
		return errUsage
	}
	r, dir, err := openRunner(ctx, f)
	if err != nil {
		return err
	}
	var all []plane.Cost
	for _, m := range ms {
		cs, err := r.Cost(ctx, m, *settle, *window)
		if err != nil {
			return fmt.Errorf("mode %s: %w", m.Name, err)
		}
		all = append(all, cs...)
	}
	stamp := time.Now().UTC().Format("20060102T150405")
	b, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "cost-"+stamp+".json"), b, 0o644); err != nil {
		return err
	}
	tf, err := os.Create(filepath.Join(dir, "cost-"+stamp+".md"))
	if err != nil {
		return err
	}
	defer tf.Close()
	plane.WriteCosts(io.MultiWriter(os.Stdout, tf), all)
	fmt.Printf("saved %s/cost-%s.{json,md}\n", dir, stamp)
	return nil
}
