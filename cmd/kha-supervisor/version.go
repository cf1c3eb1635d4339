package main

import "fmt"

// version is stamped at build time: -ldflags "-X main.version=...".
var version = "dev"

func init() {
	register("version", "print the version", func(e env, args []string) int {
		fmt.Fprintln(e.stdout, version)
		return exitOK
	})
}
