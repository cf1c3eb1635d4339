package fencing

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock is what the fence window is measured on. Callers keep taking their
// instants with time.Now() (Go's monotonic clock is CLOCK_MONOTONIC, which
// NTP slewing speeds up or slows down: chrony by up to 83,333 ppm by
// default), and a Deadline maps them onto its Clock when it records them and
// back when it reports: only the short stretch between an instant being
// taken and being handed over (a renewal's round trip) is measured on Go's
// clock, and that stretch is widened by rawMargin in the safe direction.
type Clock interface {
	// Past returns t, taken with time.Now() a little earlier, on this
	// clock, rounded towards earlier.
	Past(t time.Time) time.Time
	// Present returns t, taken with time.Now() just now, on this clock,
	// rounded towards later.
	Present(t time.Time) time.Time
	// Out returns c, an instant on this clock, as a time.Now() instant.
	Out(c time.Time) time.Time
}

// rawMargin covers the slew of Go's clock over the stretch it measures
// before an instant reaches the Deadline: 10 %, above chrony's default
// maximum slew of 8.3 %.
const rawMargin = 10

// IdentityClock measures on Go's own clock: table tests with synthetic
// instants.
type IdentityClock struct{}

func (IdentityClock) Past(t time.Time) time.Time    { return t }
func (IdentityClock) Present(t time.Time) time.Time { return t }
func (IdentityClock) Out(c time.Time) time.Time     { return c }

// RawClock is CLOCK_MONOTONIC_RAW: the hardware counter, which NTP does not
// slew. Read, when set, returns a (raw, Go) pair of readings taken together
// (tests); nil reads the real clocks.
type RawClock struct {
	Read func() (raw, goNow time.Time)
}

func (c RawClock) read() (time.Time, time.Time) {
	if c.Read != nil {
		return c.Read()
	}
	return RawNow(), time.Now()
}

// Past maps t onto the raw clock, with Go's measure of how long ago t was
// taken lengthened by rawMargin: an earlier instant fences earlier.
func (c RawClock) Past(t time.Time) time.Time {
	raw, now := c.read()
	ago := now.Sub(t)
	if ago > 0 {
		ago += ago / rawMargin
	}
	return raw.Add(-ago)
}

// Present maps t onto the raw clock, with how long ago it was taken
// shortened by rawMargin: a later "now" fences earlier.
func (c RawClock) Present(t time.Time) time.Time {
	raw, now := c.read()
	ago := now.Sub(t)
	if ago > 0 {
		ago -= ago / rawMargin
	}
	return raw.Add(-ago)
}

// Out maps a raw instant to a time.Now() instant as of now.
func (c RawClock) Out(r time.Time) time.Time {
	raw, now := c.read()
	return now.Add(r.Sub(raw))
}

// RawNow reads CLOCK_MONOTONIC_RAW as a time.Time without a monotonic
// reading: only differences between its values mean anything.
func RawNow() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC_RAW, &ts); err != nil {
		// Linux has had it since 2.6.28; without it there is no safe
		// clock to fall back to but Go's own.
		return time.Now()
	}
	return time.Unix(ts.Unix())
}
