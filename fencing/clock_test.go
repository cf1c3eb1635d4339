package fencing

import (
	"testing"
	"time"
)

// slewed is a pair of clocks where Go's (CLOCK_MONOTONIC) runs at rate
// against the raw one, as while NTP slews it.
type slewed struct {
	base time.Time
	real time.Duration // raw time elapsed
	rate float64       // Go's clock per raw second
}

func (s *slewed) goNow() time.Time { return s.base.Add(time.Duration(float64(s.real) * s.rate)) }
func (s *slewed) read() (time.Time, time.Time) {
	return time.Unix(0, 0).Add(time.Hour + s.real), s.goNow()
}

// TestDeadlineMeasuresOnTheRawClock (issue 13 item 8): while chrony slews
// Go's clock 8.3 % slow, a Deadline that trusted it would fence that much
// too late; on the raw clock it fences when the real span has passed.
func TestDeadlineMeasuresOnTheRawClock(t *testing.T) {
	clk := &slewed{base: time.Now(), rate: 1 - 0.083333}
	d := NewDeadlineClock(defaults, RawClock{Read: clk.read})
	d.Renewed("election", clk.goNow(), 10*time.Second)
	span := defaults.Span(10 * time.Second)
	clk.real = span - 10*time.Millisecond
	if d.Expired(clk.goNow()) {
		t.Fatalf("expired %s before the span on the raw clock", 10*time.Millisecond)
	}
	clk.real = span + time.Millisecond
	if !d.Expired(clk.goNow()) {
		t.Fatalf("not expired when %s of raw time passed (Go's clock says %s): the slew stretched the window",
			clk.real, clk.goNow().Sub(clk.base))
	}
	if left := d.Left(clk.goNow()); left > 0 {
		t.Fatalf("Left = %s after the span", left)
	}
	// At, reported on Go's clock, is the raw instant as of now.
	at, _ := d.At()
	if got := at.Sub(clk.goNow()); got > 0 || got < -2*time.Millisecond {
		t.Fatalf("At is %s from now, want about -1ms", got)
	}
}

// A renewal answered late: the stretch Go's clock measured between the send
// and the hand-over is widened, never narrowed, on either slew direction.
func TestRawClockRoundsTheSafeWay(t *testing.T) {
	for _, rate := range []float64{0.92, 1, 1.08} {
		clk := &slewed{base: time.Now(), rate: rate}
		c := RawClock{Read: clk.read}
		sent := clk.goNow()
		clk.real = time.Second
		rawSent := c.Past(sent)
		rawNow, _ := clk.read()
		// One real second passed; with Go's clock up to 8.3 % slow the
		// mapped send must still be at least that far back.
		if ago := rawNow.Sub(rawSent); ago < time.Second {
			t.Errorf("rate %g: a send one raw second ago mapped only %s back", rate, ago)
		}
		if got := c.Present(clk.goNow()); !got.Equal(rawNow) {
			t.Errorf("rate %g: Present(now) = %v, want the raw now %v", rate, got, rawNow)
		}
	}
	// The real clock: raw and Go's advance together, and RawNow moves.
	a := RawNow()
	time.Sleep(20 * time.Millisecond)
	if d := RawNow().Sub(a); d < 15*time.Millisecond || d > 2*time.Second {
		t.Fatalf("CLOCK_MONOTONIC_RAW advanced %s over a 20 ms sleep", d)
	}
}
