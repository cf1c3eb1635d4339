package main

import (
	"errors"
	"flag"
	"slices"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
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

func TestSoakRefusesBadLimits(t *testing.T) {
	for _, args := range [][]string{
		{"--faults", "3"},                                      // the stand-in plane counts no faults
		{"--plane", "real", "--faults", "-1"},                  // negative
		{"--plane", "real", "--duration", "0s"},                // no time at all
		{"--plane", "real", "--mode", "tokens", "--seed", "3"}, // unknown mode
	} {
		if err := runSoak(t.Context(), args); !errors.Is(err, errUsage) {
			t.Errorf("kha-lab soak %v: %v, want a usage error", args, err)
		}
	}
}

// A scenario whose fault is defined in the other etcd layout is a usage
// error naming it, before anything runs (run, sidebyside and soak).
func TestRunRefusesScenariosOfAnotherLayout(t *testing.T) {
	if err := layoutFits(lab.LayoutSeparate, []int{40, 41, 66}); err != nil {
		t.Fatalf("separate lab, scenarios 40 41 66: %v", err)
	}
	if err := layoutFits(lab.LayoutStacked, []int{40, 60, 72, 73}); err != nil {
		t.Fatalf("stacked lab, scenarios 40 60 72 73: %v", err)
	}
	if err := layoutFits(lab.LayoutSeparate, []int{40, 72}); err == nil || !strings.Contains(err.Error(), "72 (stacked)") {
		t.Fatalf("separate lab, scenario 72: err = %v, want one naming 72 and its layout", err)
	}
	// The soak's catalogue cuts masters from "the etcd rack" (41, 46):
	// not on a stacked lab.
	if err := layoutFits(lab.LayoutStacked, plane.SoakFaults); err == nil || !strings.Contains(err.Error(), "46 (separate)") {
		t.Fatalf("stacked lab, the soak's faults: err = %v, want one naming 46", err)
	}
}
