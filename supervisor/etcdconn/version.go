package etcdconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ServerVersion returns the lowest etcd version among the endpoints that
// answer (Maintenance.Status on each). Endpoints that do not answer are
// skipped: this feeds a start-up warning, and a member that is down cannot
// be judged. It fails only when no endpoint answers.
func ServerVersion(ctx context.Context, cli Client) (string, error) {
	var (
		lowest string
		found  bool
		errs   []error
	)
	for _, r := range statusAll(ctx, cli) {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", r.endpoint, r.err))
			continue
		}
		v := r.resp.Version
		if !found || compareVersions(v, lowest) < 0 {
			lowest, found = v, true
		}
	}
	if !found {
		if len(errs) == 0 {
			return "", errors.New("etcd: no endpoints")
		}
		return "", fmt.Errorf("etcd: server version: %w", errors.Join(errs...))
	}
	return lowest, nil
}

// LeaseSafeVersion reports whether an etcd server of version v has the fixes
// for leases being revoked or renewed by a stuck former leader: v3.5.13 and
// later, or v3.4.31 and later on the 3.4 line. A version it cannot parse, or
// a pre-release of a fixed version, is not safe: the caller warns.
func LeaseSafeVersion(v string) bool {
	sv, ok := parseVersion(v)
	if !ok {
		return false
	}
	switch {
	case sv.major != 3:
		return sv.major > 3
	case sv.minor > 5:
		return true
	case sv.minor == 5:
		return sv.atLeastRelease(13)
	case sv.minor == 4:
		return sv.atLeastRelease(31)
	default:
		return false
	}
}

type version struct {
	major, minor, patch int
	pre                 string // "" for a release
}

// atLeastRelease reports whether v is at or past release x.y.patch of its
// own minor line; a pre-release of that very patch is not.
func (v version) atLeastRelease(patch int) bool {
	return v.patch > patch || (v.patch == patch && v.pre == "")
}

// parseVersion reads "3.5.13", "v3.5.13", "3.6.0-rc.1" and "3.5.13+build".
func parseVersion(s string) (version, bool) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	s, _, _ = strings.Cut(s, "+")
	s, pre, _ := strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return version{}, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || p == "" || (len(p) > 1 && p[0] == '0') {
			return version{}, false
		}
		n[i] = x
	}
	return version{major: n[0], minor: n[1], patch: n[2], pre: pre}, true
}

// compareVersions orders versions; one that does not parse sorts below every
// one that does, so ServerVersion reports it (and the caller warns).
func compareVersions(a, b string) int {
	va, oka := parseVersion(a)
	vb, okb := parseVersion(b)
	switch {
	case !oka && !okb:
		return strings.Compare(a, b)
	case !oka:
		return -1
	case !okb:
		return 1
	}
	for _, d := range []int{va.major - vb.major, va.minor - vb.minor, va.patch - vb.patch} {
		if d != 0 {
			return d
		}
	}
	// A pre-release precedes its release; two pre-releases compare as text,
	// which is enough for a warning.
	switch {
	case va.pre == vb.pre:
		return 0
	case va.pre == "":
		return 1
	case vb.pre == "":
		return -1
	default:
		return strings.Compare(va.pre, vb.pre)
	}
}
