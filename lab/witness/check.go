package witness

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Key names one process incarnation of one unit on one node.
type Key struct {
	Node  string
	Unit  string
	PID   int
	Start int64 // the witness's start instant (ns): tells apart a reused PID
}

// Instance is what the heartbeats of one incarnation show.
type Instance struct {
	Key
	First  time.Time     // first heartbeat
	Last   time.Time     // last heartbeat
	Beats  int           // heartbeat count
	MaxGap time.Duration // longest pause between two heartbeats (scheduling noise)
}

// Until is the end of the instance's alive interval: Last + Grace. The
// interval is [First, Until): an instance that may still have been working
// between two beats counts as alive all along, which can only add overlaps,
// never hide one.
func (i Instance) Until() time.Time { return i.Last.Add(Grace) }

// Overlap is an interval during which two nodes' instances of one unit were
// both alive.
type Overlap struct {
	Unit     string
	A, B     Instance
	From, To time.Time
}

// Duration is the length of the overlap.
func (o Overlap) Duration() time.Duration { return o.To.Sub(o.From) }

func (o Overlap) String() string {
	return fmt.Sprintf("%s: %s (pid %d) and %s (pid %d) both alive from %s for %.3f ms",
		o.Unit, o.A.Node, o.A.PID, o.B.Node, o.B.PID,
		o.From.UTC().Format("15:04:05.000"), float64(o.Duration())/float64(time.Millisecond))
}

// Log is every heartbeat read so far, folded into instances. It reads its
// directory incrementally (Refresh), so a long run can be checked all along
// without re-reading what it has seen.
type Log struct {
	dir string

	mu        sync.Mutex
	offsets   map[string]int64 // file -> bytes consumed (complete lines only)
	instances map[Key]*Instance
}

// NewLog returns a Log over dir; call Refresh to read.
func NewLog(dir string) *Log {
	return &Log{dir: dir, offsets: map[string]int64{}, instances: map[Key]*Instance{}}
}

// ReadDir reads every log in dir once.
func ReadDir(dir string) (*Log, error) {
	l := NewLog(dir)
	return l, l.Refresh()
}

// Refresh reads the lines appended since the last call. A line still being
// written (no newline yet) is left for the next call.
func (l *Log) Refresh() error {
	files, err := filepath.Glob(filepath.Join(l.dir, "*.log"))
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range files {
		if err := l.readFile(f); err != nil {
			return err
		}
	}
	return nil
}

func (l *Log) readFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(l.offsets[path], io.SeekStart); err != nil {
		return fmt.Errorf("witness: %w", err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a partial line waits for the next Refresh
		}
		if err != nil {
			return fmt.Errorf("witness: read %s: %w", path, err)
		}
		l.offsets[path] += int64(len(line))
		if err := l.add(bytes.TrimSuffix(line, []byte{'\n'})); err != nil {
			return fmt.Errorf("witness: %s at byte %d: %w", path, l.offsets[path]-int64(len(line)), err)
		}
	}
}

// ParseLine parses "NS NODE UNIT PID START".
func ParseLine(line string) (time.Time, Key, error) {
	f := strings.Fields(line)
	if len(f) != 5 {
		return time.Time{}, Key{}, fmt.Errorf("malformed heartbeat %q", line)
	}
	ns, err1 := strconv.ParseInt(f[0], 10, 64)
	pid, err2 := strconv.Atoi(f[3])
	st, err3 := strconv.ParseInt(f[4], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return time.Time{}, Key{}, fmt.Errorf("malformed heartbeat %q: %w", line, err)
	}
	return time.Unix(0, ns), Key{Node: f[1], Unit: f[2], PID: pid, Start: st}, nil
}

func (l *Log) add(line []byte) error {
	at, k, err := ParseLine(string(line))
	if err != nil {
		return err
	}
	in := l.instances[k]
	if in == nil {
		l.instances[k] = &Instance{Key: k, First: at, Last: at, Beats: 1}
		return nil
	}
	// Lines of one writer are in order; tolerate a clock step backwards by
	// widening rather than trusting order.
	if at.Before(in.First) {
		in.First = at
	}
	if gap := at.Sub(in.Last); gap > in.MaxGap {
		in.MaxGap = gap
	}
	if at.After(in.Last) {
		in.Last = at
	}
	in.Beats++
	return nil
}

// Instances lists every instance, ordered by first heartbeat.
func (l *Log) Instances() []Instance {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Instance, 0, len(l.instances))
	for _, in := range l.instances {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].First.Equal(out[j].First) {
			return out[i].First.Before(out[j].First)
		}
		return out[i].Node < out[j].Node
	})
	return out
}

// Overlaps returns every interval in which instances of one unit on two
// different nodes were both alive, earliest first.
func (l *Log) Overlaps() []Overlap {
	return FindOverlaps(l.Instances())
}

// FindOverlaps compares every pair of instances of the same unit on
// different nodes. Instances come in the hundreds per run, so the quadratic
// scan is cheap and obviously right.
func FindOverlaps(ins []Instance) []Overlap {
	var out []Overlap
	for i := range ins {
		for j := i + 1; j < len(ins); j++ {
			a, b := ins[i], ins[j]
			if a.Unit != b.Unit || a.Node == b.Node {
				continue
			}
			from := later(a.First, b.First)
			to := earlier(a.Until(), b.Until())
			if from.Before(to) {
				if b.First.Before(a.First) {
					a, b = b, a
				}
				out = append(out, Overlap{Unit: a.Unit, A: a, B: b, From: from, To: to})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From.Before(out[j].From) })
	return out
}

// OverlapsBetween keeps the overlaps that intersect [from, to).
func OverlapsBetween(ovs []Overlap, from, to time.Time) []Overlap {
	var out []Overlap
	for _, o := range ovs {
		if o.From.Before(to) && o.To.After(from) {
			out = append(out, o)
		}
	}
	return out
}

// LastBeat is the latest heartbeat of node's unit at or before t (zero time
// and false when there is none).
func (l *Log) LastBeat(node, unit string, t time.Time) (time.Time, bool) {
	var best time.Time
	for _, in := range l.Instances() {
		if in.Node != node || in.Unit != unit || in.First.After(t) {
			continue
		}
		// Only First and Last are kept per instance, so an instance still
		// beating after t reports t itself: it was alive then.
		last := in.Last
		if last.After(t) {
			last = t
		}
		if last.After(best) {
			best = last
		}
	}
	return best, !best.IsZero()
}

// FirstBeat is the earliest heartbeat of node's unit at or after t.
func (l *Log) FirstBeat(node, unit string, t time.Time) (time.Time, bool) {
	var best time.Time
	for _, in := range l.Instances() {
		if in.Node != node || in.Unit != unit || in.Last.Before(t) {
			continue
		}
		first := in.First
		if first.Before(t) {
			first = t // already beating at t
		}
		if best.IsZero() || first.Before(best) {
			best = first
		}
	}
	return best, !best.IsZero()
}

// AliveAt reports whether an instance of node's unit was alive at t.
func (l *Log) AliveAt(node, unit string, t time.Time) bool {
	for _, in := range l.Instances() {
		if in.Node == node && in.Unit == unit && !t.Before(in.First) && t.Before(in.Until()) {
			return true
		}
	}
	return false
}

// LastEnd is the latest heartbeat of node's unit over the whole log.
func (l *Log) LastEnd(node, unit string) (time.Time, bool) {
	return l.LastBeat(node, unit, time.Unix(1<<40, 0))
}

// InstanceAt returns the instance of node's unit alive at t.
func (l *Log) InstanceAt(node, unit string, t time.Time) (Instance, bool) {
	for _, in := range l.Instances() {
		if in.Node == node && in.Unit == unit && !t.Before(in.First) && t.Before(in.Until()) {
			return in, true
		}
	}
	return Instance{}, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Interval is the half-open span [From, To).
type Interval struct{ From, To time.Time }

// Coverage merges the alive intervals of unit on any node, clipped to
// [from, to): when at least one node ran it.
func Coverage(ins []Instance, unit string, from, to time.Time) []Interval {
	var ivs []Interval
	for _, in := range ins {
		if in.Unit != unit {
			continue
		}
		a, b := later(in.First, from), earlier(in.Until(), to)
		if a.Before(b) {
			ivs = append(ivs, Interval{a, b})
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].From.Before(ivs[j].From) })
	var out []Interval
	for _, iv := range ivs {
		if n := len(out); n > 0 && !iv.From.After(out[n-1].To) {
			out[n-1].To = later(out[n-1].To, iv.To)
			continue
		}
		out = append(out, iv)
	}
	return out
}

// LongestGap is the longest span inside [from, to) during which no node ran
// unit (zero when it ran all along).
func LongestGap(ins []Instance, unit string, from, to time.Time) Interval {
	var best Interval
	cursor := from
	consider := func(a, b time.Time) {
		if b.Sub(a) > best.To.Sub(best.From) {
			best = Interval{a, b}
		}
	}
	for _, iv := range Coverage(ins, unit, from, to) {
		consider(cursor, iv.From)
		cursor = later(cursor, iv.To)
	}
	consider(cursor, to)
	return best
}

// FirstStart is the earliest first heartbeat of an instance of node's unit
// that started after t (one already running at t does not count).
func (l *Log) FirstStart(node, unit string, t time.Time) (time.Time, bool) {
	var best time.Time
	for _, in := range l.Instances() {
		if in.Node == node && in.Unit == unit && in.First.After(t) && (best.IsZero() || in.First.Before(best)) {
			best = in.First
		}
	}
	return best, !best.IsZero()
}

// InstancesBetween lists the instances of node's unit alive at some point
// in [from, to).
func (l *Log) InstancesBetween(node, unit string, from, to time.Time) []Instance {
	var out []Instance
	for _, in := range l.Instances() {
		if in.Node == node && in.Unit == unit && in.First.Before(to) && in.Until().After(from) {
			out = append(out, in)
		}
	}
	return out
}
