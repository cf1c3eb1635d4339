package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
)

func init() {
	register("kube-build", "build kube-apiserver, kube-scheduler, kube-controller-manager once into a cache", runKubeBuild)
}

func runKubeBuild(ctx context.Context, args []string) error {
	var fs flag.FlagSet
	o := build.Options{Progress: os.Stdout}
	fs.StringVar(&o.Version, "version", build.DefaultVersion, "Kubernetes release to build")
	fs.StringVar(&o.CacheDir, "cache", build.DefaultCacheDir, "cache directory (one subdirectory per release)")
	fs.StringVar(&o.Go, "go", "go", "go command to build with (GOTOOLCHAIN=local: no other toolchain is fetched)")
	pos, err := parse("kube-build", args, &fs)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		fmt.Fprintf(os.Stderr, "kha-lab kube-build: unexpected argument %q\n", pos[0])
		return errUsage
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "kha-lab kube-build: %v\n", err)
		return errUsage
	}
	r, err := build.Ensure(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("kube-build: %s\n", r.Dir)
	return nil
}
