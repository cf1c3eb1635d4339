package witness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func ms(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }

// beats writes heartbeats of one instance every Period from first to last
// (both included; last is adjusted to land exactly).
func beats(t *testing.T, dir, node, unit string, pid int, first, last time.Time) {
	t.Helper()
	var b strings.Builder
	for at := first; !at.After(last); at = at.Add(Period) {
		fmt.Fprintf(&b, "%d %s %s %d %d\n", at.UnixNano(), node, unit, pid, first.UnixNano())
		if next := at.Add(Period); next.After(last) && at.Before(last) {
			fmt.Fprintf(&b, "%d %s %s %d %d\n", last.UnixNano(), node, unit, pid, first.UnixNano())
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, FileName(node, unit)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, dir string) *Log {
	t.Helper()
	l, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestOverlapFound(t *testing.T) {
	dir := t.TempDir()
	beats(t, dir, "m1", "kube-scheduler", 10, ms(0), ms(1000))
	beats(t, dir, "m2", "kube-scheduler", 20, ms(1010), ms(2000))
	ovs := read(t, dir).Overlaps()
	if len(ovs) != 1 {
		t.Fatalf("overlaps = %v, want one", ovs)
	}
	o := ovs[0]
	if !o.From.Equal(ms(1010)) || !o.To.Equal(ms(1040)) || o.Duration() != 30*time.Millisecond {
		t.Fatalf("overlap %v..%v (%s), want 1010..1040 ms (30ms)", o.From.Sub(t0), o.To.Sub(t0), o.Duration())
	}
	if o.A.Node != "m1" || o.B.Node != "m2" || o.A.PID != 10 || o.B.PID != 20 {
		t.Fatalf("overlap names %s/%d and %s/%d, want m1/10 then m2/20", o.A.Node, o.A.PID, o.B.Node, o.B.PID)
	}
	if !strings.Contains(o.String(), "30.000 ms") {
		t.Fatalf("report %q must give the overlap to the millisecond", o.String())
	}
}

func TestNearMissNotFlagged(t *testing.T) {
	dir := t.TempDir()
	beats(t, dir, "m1", "kube-scheduler", 10, ms(0), ms(1000))
	beats(t, dir, "m2", "kube-scheduler", 20, ms(1041), ms(2000))
	if ovs := read(t, dir).Overlaps(); len(ovs) != 0 {
		t.Fatalf("a successor starting 41 ms after the last beat was flagged: %v", ovs)
	}
}

// Alive is [first, last+40ms): a successor starting exactly at last+40ms does
// not overlap; one nanosecond earlier does.
func TestBoundaryAtTwoPeriods(t *testing.T) {
	dir := t.TempDir()
	beats(t, dir, "m1", "kube-scheduler", 10, ms(0), ms(1000))
	beats(t, dir, "m2", "kube-scheduler", 20, ms(1040), ms(2000))
	if ovs := read(t, dir).Overlaps(); len(ovs) != 0 {
		t.Fatalf("start at exactly last+2 periods flagged: %v", ovs)
	}

	dir = t.TempDir()
	beats(t, dir, "m1", "kube-scheduler", 10, ms(0), ms(1000))
	beats(t, dir, "m2", "kube-scheduler", 20, ms(1040).Add(-time.Nanosecond), ms(2000))
	ovs := read(t, dir).Overlaps()
	if len(ovs) != 1 || ovs[0].Duration() != time.Nanosecond {
		t.Fatalf("start 1 ns before last+2 periods: overlaps %v, want one of 1ns", ovs)
	}
}

// Several failovers back and forth: only the one real overlap is reported,
// with the right instances; restarts on one node and other units never are.
func TestMultipleRestarts(t *testing.T) {
	dir := t.TempDir()
	beats(t, dir, "m1", "kube-scheduler", 10, ms(0), ms(1000))
	beats(t, dir, "m1", "kube-scheduler", 11, ms(1005), ms(1500)) // same node restart, overlapping itself
	beats(t, dir, "m2", "kube-scheduler", 20, ms(2000), ms(3000))
	beats(t, dir, "m1", "kube-scheduler", 12, ms(4000), ms(5000))
	beats(t, dir, "m2", "kube-scheduler", 21, ms(4990), ms(6000)) // overlaps m1/12 by 50 ms
	beats(t, dir, "m2", "kube-controller-manager", 22, ms(0), ms(6000))
	beats(t, dir, "m1", "kube-controller-manager", 13, ms(6100), ms(7000))
	l := read(t, dir)
	if n := len(l.Instances()); n != 7 {
		t.Fatalf("instances = %d, want 7", n)
	}
	ovs := l.Overlaps()
	if len(ovs) != 1 {
		t.Fatalf("overlaps = %v, want exactly one", ovs)
	}
	o := ovs[0]
	if o.A.PID != 12 || o.B.PID != 21 || !o.From.Equal(ms(4990)) || !o.To.Equal(ms(5040)) {
		t.Fatalf("overlap %s, want m1/12 with m2/21 from 4990 to 5040 ms", o)
	}
	if got := OverlapsBetween(ovs, ms(0), ms(4000)); len(got) != 0 {
		t.Fatalf("overlap reported in a window that has none: %v", got)
	}
	if got := OverlapsBetween(ovs, ms(5000), ms(5500)); len(got) != 1 {
		t.Fatalf("window 5000..5500 must hold the overlap")
	}

	if at, ok := l.LastBeat("m1", "kube-scheduler", ms(3500)); !ok || !at.Equal(ms(1500)) {
		t.Fatalf("LastBeat(m1, 3500ms) = %v %v, want 1500ms", at.Sub(t0), ok)
	}
	if at, ok := l.FirstBeat("m2", "kube-scheduler", ms(3500)); !ok || !at.Equal(ms(4990)) {
		t.Fatalf("FirstBeat(m2, 3500ms) = %v %v, want 4990ms", at.Sub(t0), ok)
	}
	if at, ok := l.FirstBeat("m2", "kube-scheduler", ms(2500)); !ok || !at.Equal(ms(2500)) {
		t.Fatalf("FirstBeat inside a running instance = %v, want the query instant", at.Sub(t0))
	}
	if !l.AliveAt("m1", "kube-scheduler", ms(1539)) || l.AliveAt("m1", "kube-scheduler", ms(1540)) {
		t.Fatalf("AliveAt must hold until last+40ms exclusive")
	}
	in, ok := l.InstanceAt("m2", "kube-scheduler", ms(2500))
	if !ok || in.PID != 20 || !in.Last.Equal(ms(3000)) {
		t.Fatalf("InstanceAt = %+v %v", in, ok)
	}
}

// The checker reads a log that is being appended to: a line without its
// newline is left for later, and a second Refresh picks up only new lines.
func TestIncrementalRefresh(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName("m1", "u"))
	l := NewLog(dir)
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(fmt.Sprintf("%d m1 u 5 1\n%d m1 u 5", ms(0).UnixNano(), ms(20).UnixNano()))
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	if in := l.Instances(); len(in) != 1 || in[0].Beats != 1 {
		t.Fatalf("after a partial line: %+v, want one instance with one beat", in)
	}
	write(" 1\n")
	if err := l.Refresh(); err != nil {
		t.Fatal(err)
	}
	in := l.Instances()
	if len(in) != 1 || in[0].Beats != 2 || !in[0].Last.Equal(ms(20)) || in[0].MaxGap != 20*time.Millisecond {
		t.Fatalf("after completing the line: %+v", in)
	}

	write("garbage line\n")
	if err := l.Refresh(); err == nil {
		t.Fatalf("a malformed line must be an error")
	}
}

func TestCoverageAndLongestGap(t *testing.T) {
	dir := t.TempDir()
	beats(t, dir, "m1", "s", 1, ms(0), ms(1000))
	beats(t, dir, "m2", "s", 2, ms(1500), ms(2000)) // gap 1040..1500
	beats(t, dir, "m1", "s", 3, ms(2010), ms(3000)) // overlapping m2: no gap
	beats(t, dir, "m2", "other", 4, ms(0), ms(5000))
	ins := read(t, dir).Instances()
	cov := Coverage(ins, "s", ms(0), ms(4000))
	if len(cov) != 2 || !cov[0].To.Equal(ms(1040)) || !cov[1].From.Equal(ms(1500)) || !cov[1].To.Equal(ms(3040)) {
		t.Fatalf("coverage = %v", cov)
	}
	g := LongestGap(ins, "s", ms(0), ms(4000))
	if !g.From.Equal(ms(3040)) || !g.To.Equal(ms(4000)) {
		t.Fatalf("longest gap = %v..%v, want 3040..4000 ms", g.From.Sub(t0), g.To.Sub(t0))
	}
	g = LongestGap(ins, "s", ms(0), ms(3000))
	if !g.From.Equal(ms(1040)) || !g.To.Equal(ms(1500)) {
		t.Fatalf("longest gap to 3000 = %v..%v, want 1040..1500 ms", g.From.Sub(t0), g.To.Sub(t0))
	}
	if g := LongestGap(ins, "other", ms(100), ms(4000)); g.To.Sub(g.From) != 0 {
		t.Fatalf("a unit running all along has gap %v", g)
	}
}
