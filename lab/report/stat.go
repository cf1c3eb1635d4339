package report

import (
	"fmt"
	"slices"
)

// Stat is the median and spread of one figure over runs: the one summary
// every table of the lab prints (the matrix's milliseconds, the real
// plane's seconds).
type Stat struct {
	N                int
	Median, Min, Max float64
}

// Summarize is the median and spread of vs (the mean of the two middle
// values when there is an even number).
func Summarize(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{N: len(s), Median: med, Min: s[0], Max: s[len(s)-1]}
}

// String is the matrix's form, milliseconds: "812 ms (790 ms–840 ms)".
func (s Stat) String() string {
	switch {
	case s.N == 0:
		return "–"
	case s.N == 1 || s.Min == s.Max:
		return fmtMS(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", fmtMS(s.Median), fmtMS(s.Min), fmtMS(s.Max))
}

// Seconds is the real plane's form of a Stat of milliseconds: "6.77 s
// [6.71-7.24]".
func (s Stat) Seconds() string {
	switch s.N {
	case 0:
		return "-"
	case 1:
		return fmt.Sprintf("%.2f s", s.Median/1000)
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f]", s.Median/1000, s.Min/1000, s.Max/1000)
}

func fmtMS(v float64) string {
	if v >= 10000 || v <= -10000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
