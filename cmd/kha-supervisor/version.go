package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register(func(e env) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "print the version",
			Long:  "Print the version (the package version it was built as); the same as --version.",
			Run:   func(*cobra.Command, []string) { fmt.Fprintln(e.stdout, version) },
		}
	})
}
