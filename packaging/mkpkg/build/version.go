package build

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// describeArgs is the one git describe invocation the version comes from.
// --long always prints the distance and hash, so an exact tag and a tag with
// a "-rc.1" suffix parse the same way; --match keeps unrelated tags out.
var describeArgs = []string{"describe", "--tags", "--always", "--long", "--dirty", "--abbrev=12", "--match", "v[0-9]*"}

var (
	taggedRE = regexp.MustCompile(`^v([0-9]+\.[0-9]+\.[0-9]+)(?:-([0-9A-Za-z.]+))?-([0-9]+)-g([0-9a-f]+)$`)
	hashRE   = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
)

// VersionFromDescribe maps `git describe` output (describeArgs) to a version
// that deb and rpm both accept and order the way the history runs:
//
//	v0.1.0-0-gHASH          0.1.0                 a release
//	v0.1.0-3-gHASH          0.1.0+3.gHASH         3 commits after it
//	v0.2.0-rc.1-0-gHASH     0.2.0~rc.1            "~" sorts before 0.2.0
//	HASH (no tag yet)       0.0.0+N.gHASH         N = commits in HEAD's history
//	...-dirty               ...+....dirty         uncommitted changes
//
// The commit count makes untagged builds of one branch increase, so an
// upgrade to a later build is an upgrade for dpkg and rpm alike; any real
// release (0.1.0) sorts above every untagged build.
func VersionFromDescribe(describe string, commits int) (string, error) {
	d := strings.TrimSpace(describe)
	dirty := strings.HasSuffix(d, "-dirty")
	d = strings.TrimSuffix(d, "-dirty")

	var base, pre, hash string
	var distance int
	if m := taggedRE.FindStringSubmatch(d); m != nil {
		base, pre, hash = m[1], m[2], m[4]
		distance, _ = strconv.Atoi(m[3])
	} else if hashRE.MatchString(d) {
		if commits < 1 {
			return "", fmt.Errorf("git describe %q: no tag, and commit count %d is not positive", describe, commits)
		}
		base, hash, distance = "0.0.0", d, commits
	} else {
		return "", fmt.Errorf("git describe %q: want vX.Y.Z[-PRE]-N-gHASH or a bare hash", describe)
	}

	v := base
	if pre != "" {
		v += "~" + pre
	}
	if distance > 0 || dirty {
		v += fmt.Sprintf("+%d.g%s", distance, hash)
	}
	if dirty {
		v += ".dirty"
	}
	return v, nil
}

// validVersion is what both dpkg (upstream version, no revision) and rpm
// (Version tag) accept: it must start with a digit; no "-", no spaces.
var validVersion = regexp.MustCompile(`^[0-9][0-9A-Za-z.+~]*$`)

// CheckVersion refuses a version that deb or rpm would reject.
func CheckVersion(v string) error {
	if !validVersion.MatchString(v) {
		return fmt.Errorf("version %q: want a digit first, then only letters, digits, '.', '+' and '~'", v)
	}
	return nil
}

// GitVersion computes the package version of the checkout at root.
func GitVersion(ctx context.Context, root string) (string, error) {
	describe, err := git(ctx, root, describeArgs...)
	if err != nil {
		return "", err
	}
	count, err := git(ctx, root, "rev-list", "--count", "HEAD")
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		return "", fmt.Errorf("git rev-list --count: %q: %w", count, err)
	}
	return VersionFromDescribe(describe, n)
}

// SourceDateEpoch is the timestamp every file in the packages carries:
// $SOURCE_DATE_EPOCH when set (the reproducible-builds convention), else the
// committer time of HEAD, so that two builds of one commit are identical
// whenever and wherever they run.
func SourceDateEpoch(ctx context.Context, root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = git(ctx, root, "log", "-1", "--format=%ct"); err != nil {
			return time.Time{}, err
		}
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, fmt.Errorf("source date epoch %q: want positive seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func git(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", root}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
