package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register(func(e env) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "print the version",
			Long:  "Print the version (the package version it was built as); the same as --version. A build without one (go build, go install) prints \"dev\" with the commit, its date and whether the tree was modified, from the Go build information.",
			Run:   func(*cobra.Command, []string) { fmt.Fprintln(e.stdout, versionText()) },
		}
	})
}

// versionText is the release version, or for a build without one the
// commit it was built from. The commit's date stands for the build date:
// the packages are built reproducibly, so no build carries its own clock.
func versionText() string {
	info, _ := debug.ReadBuildInfo()
	return describeVersion(version, info)
}

func describeVersion(v string, info *debug.BuildInfo) string {
	if v != "dev" || info == nil {
		return v
	}
	s := map[string]string{}
	for _, kv := range info.Settings {
		s[kv.Key] = kv.Value
	}
	var parts []string
	if rev := s["vcs.revision"]; rev != "" {
		c := "commit " + rev[:min(12, len(rev))]
		if s["vcs.modified"] == "true" {
			c += " (modified)"
		}
		parts = append(parts, c)
	}
	if t := s["vcs.time"]; t != "" {
		parts = append(parts, "committed "+t)
	}
	if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		parts = append(parts, "module "+mv)
	}
	parts = append(parts, info.GoVersion)
	return v + " (" + strings.Join(parts, ", ") + ")"
}
