package report

import (
	"fmt"
	"io"
	"sort"
)

// SoakStats sums up a soak.
type SoakStats struct {
	Seed         uint64         `json:"seed"`
	Requested    string         `json:"requested"`
	Ran          string         `json:"ran"`
	Faults       map[string]int `json:"faults"`
	Failed       int            `json:"failed"`
	FailedIn     []string       `json:"failed_in,omitempty"` // scenario and first problem of each miss
	Transitions  int            `json:"transitions"`
	LongestGapMS float64        `json:"longest_unavailable_ms"`
	LongestGapIn string         `json:"longest_unavailable_in"`
	OverlapMS    float64        `json:"overlap_ms"`
	OverlapCount int            `json:"overlaps"`
}

// WriteMarkdown prints the soak's summary.
func (st *SoakStats) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "### Soak: seed %d, %s requested, %s run\n\n", st.Seed, st.Requested, st.Ran)
	total := 0
	var names []string
	for n, c := range st.Faults {
		total += c
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "- faults injected: %d (", total)
	for i, n := range names {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%s x%d", n, st.Faults[n])
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "- scenarios that missed an expectation: %d\n", st.Failed)
	for _, f := range st.FailedIn {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	fmt.Fprintf(w, "- leadership transitions: %d\n", st.Transitions)
	fmt.Fprintf(w, "- longest unavailability of a unit: %s in %s\n", fmtMS(st.LongestGapMS), st.LongestGapIn)
	fmt.Fprintf(w, "- overlap: %.0f ms in %d interval(s)\n", st.OverlapMS, st.OverlapCount)
}
