package main

import (
	"flag"
	"slices"
	"testing"
)

func TestParseInterspersedFlags(t *testing.T) {
	var fs flag.FlagSet
	repeat := fs.Int("repeat", 1, "")
	prefix := fs.String("prefix", "khalab", "")
	pos, err := parse("run", []string{"1", "--repeat", "3", "4", "--prefix", "x", "5"}, &fs)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pos, []string{"1", "4", "5"}) || *repeat != 3 || *prefix != "x" {
		t.Fatalf("pos %v repeat %d prefix %s", pos, *repeat, *prefix)
	}
	var fs2 flag.FlagSet
	fs2.Bool("v", false, "")
	pos, err = parse("run", []string{"m1", "--", "systemctl", "-v"}, &fs2)
	if err != nil || !slices.Equal(pos, []string{"m1", "systemctl", "-v"}) {
		t.Fatalf("after --: %v %v", pos, err)
	}
	var fs4 flag.FlagSet
	fs4.String("prefix", "", "")
	pos, err = parseLeading("exec", []string{"--prefix", "x", "m1", "systemctl", "status", "-l"}, &fs4)
	if err != nil || !slices.Equal(pos, []string{"m1", "systemctl", "status", "-l"}) {
		t.Fatalf("exec keeps the command's flags: %v %v", pos, err)
	}
	var fs3 flag.FlagSet
	if _, err := parse("run", []string{"all", "--nope"}, &fs3); err == nil {
		t.Fatalf("an unknown flag must be refused")
	}
}
