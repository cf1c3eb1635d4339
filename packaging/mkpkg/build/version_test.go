package build

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

func TestVersionFromDescribe(t *testing.T) {
	for _, c := range []struct {
		describe string
		commits  int
		want     string
	}{
		{"v0.1.0-0-g0123456789ab", 40, "0.1.0"},
		{"v0.1.0-3-g0123456789ab", 40, "0.1.0+3.g0123456789ab"},
		{"v0.1.0-3-g0123456789ab-dirty", 40, "0.1.0+3.g0123456789ab.dirty"},
		{"v0.1.0-0-g0123456789ab-dirty", 40, "0.1.0+0.g0123456789ab.dirty"},
		{"v0.2.0-rc.1-0-g0123456789ab", 40, "0.2.0~rc.1"},
		{"v0.2.0-rc.1-2-g0123456789ab", 40, "0.2.0~rc.1+2.g0123456789ab"},
		{"0123456789ab", 17, "0.0.0+17.g0123456789ab"},
		{"0123456789ab-dirty", 17, "0.0.0+17.g0123456789ab.dirty"},
	} {
		got, err := VersionFromDescribe(c.describe, c.commits)
		if err != nil || got != c.want {
			t.Errorf("VersionFromDescribe(%q, %d) = %q, %v; want %q", c.describe, c.commits, got, err, c.want)
		}
		if err := CheckVersion(got); err != nil {
			t.Errorf("%q: %v", got, err)
		}
	}
	for _, bad := range []string{"", "release-1", "v1.2-3-gabc", "vX"} {
		if v, err := VersionFromDescribe(bad, 3); err == nil {
			t.Errorf("VersionFromDescribe(%q) = %q, want an error", bad, v)
		}
	}
	if v, err := VersionFromDescribe("0123456789ab", 0); err == nil {
		t.Errorf("untagged with no commit count = %q, want an error", v)
	}
	for _, bad := range []string{"v1.0", "1.0-1", "1 0", "", "~1"} {
		if CheckVersion(bad) == nil {
			t.Errorf("CheckVersion(%q) accepted it", bad)
		}
	}
}

// TestVersionOrdering asks dpkg and rpm themselves: every version in the list
// must sort strictly above the one before it, in both.
func TestVersionOrdering(t *testing.T) {
	testenv.RequireCommands(t, "dpkg", "rpm")
	var seq []string
	for _, c := range []struct {
		d string
		n int
	}{
		{"0123456789ab", 9},
		{"0123456789ab-dirty", 9},
		{"fedcba987654", 10},
		{"fedcba987654", 100},
		{"v0.1.0-rc.1-0-gaaaaaaaaaaaa", 0},
		{"v0.1.0-rc.1-4-gbbbbbbbbbbbb", 0},
		{"v0.1.0-0-gcccccccccccc", 0},
		{"v0.1.0-1-gdddddddddddd", 0},
		{"v0.1.0-12-geeeeeeeeeeee", 0},
		{"v0.1.1-0-gffffffffffff", 0},
	} {
		v, err := VersionFromDescribe(c.d, c.n)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, v)
	}
	for i := 1; i < len(seq); i++ {
		lo, hi := seq[i-1], seq[i]
		if err := exec.Command("dpkg", "--compare-versions", hi, "gt", lo).Run(); err != nil {
			t.Errorf("dpkg: %s is not greater than %s (%v)", hi, lo, err)
		}
		// rpm.vercmp compares the Version field the way rpm -U does.
		out, err := exec.Command("rpm", "--eval", `%{lua: print(rpm.vercmp("`+hi+`", "`+lo+`"))}`).Output()
		if err != nil {
			t.Fatalf("rpm --eval: %v", err)
		}
		if strings.TrimSpace(string(out)) != "1" {
			t.Errorf("rpm: vercmp(%s, %s) = %s, want 1", hi, lo, out)
		}
	}
}
