// Command mkpkg builds kha-supervisor's deb and rpm packages (`make
// packages`): go run ./packaging/mkpkg [-out dist] [-arch amd64,arm64]
// [-format deb,rpm] [-version V]. The version defaults to the one derived
// from `git describe` (build.GitVersion); -print-version prints it and
// exits. It prints one line per package: path, size and sha256.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/kha-supervisor/kha-supervisor/packaging/mkpkg/build"
)

func main() {
	out := flag.String("out", "dist", "output `directory`")
	arches := flag.String("arch", "amd64,arm64", "comma-separated GOARCH `list`")
	formats := flag.String("format", "deb,rpm", "comma-separated package `formats`")
	version := flag.String("version", "", "package `version` (default: from git describe)")
	root := flag.String("root", ".", "repository root `directory`")
	printVersion := flag.Bool("print-version", false, "print the version the packages would get, and exit")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	absRoot, err := filepath.Abs(*root)
	if err != nil {
		fatal(log, err)
	}
	if *printVersion {
		v := *version
		if v == "" {
			if v, err = build.GitVersion(ctx, absRoot); err != nil {
				fatal(log, err)
			}
		}
		fmt.Println(v)
		return
	}
	arts, err := build.Build(ctx, build.Options{
		Root:    absRoot,
		OutDir:  *out,
		Version: *version,
		Arches:  split(*arches),
		Formats: split(*formats),
		Log:     log,
	})
	if err != nil {
		fatal(log, err)
	}
	for _, a := range arts {
		fmt.Printf("%s\t%d\t%s\n", a.Path, a.Size, a.SHA256)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fatal(log *slog.Logger, err error) {
	log.Error("mkpkg failed", "err", err)
	os.Exit(1)
}
