// Package metricdoc reads the metric table of docs/operations.md, so that
// tests can hold it against the metrics the daemon registers and the
// monitoring examples against it.
package metricdoc

import (
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
)

// File is the document with the table, relative to the repository root.
const File = "docs/operations.md"

// Row is one line of the table: the metric names (or name patterns such
// as go_*) it documents, their type and their labels.
type Row struct {
	Line   int
	Names  []string
	Type   string
	Labels []string
}

// Table is the parsed table.
type Table []Row

var code = regexp.MustCompile("`([^`]+)`")

// Read parses the table under the "## Metrics" heading of the file at p.
func Read(p string) (Table, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var t Table
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Metrics"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) != 4 {
				return nil, fmt.Errorf("%s:%d: a metric row has %d cells, want 4 (metric, type, labels, meaning)", p, i+1, len(cells))
			}
			t = append(t, Row{Line: i + 1, Names: codes(cells[0]), Type: strings.TrimSpace(cells[1]), Labels: codes(cells[2])})
		}
	}
	if len(t) == 0 {
		return nil, fmt.Errorf("%s: no metric table under \"## Metrics\"", p)
	}
	return t, nil
}

func codes(cell string) []string {
	var out []string
	for _, m := range code.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}

// Lookup returns the row documenting the series name (a histogram's
// _bucket, _sum and _count series count as its name; patterns match as
// path.Match does).
func (t Table) Lookup(series string) (Row, bool) {
	for _, r := range t {
		for _, n := range r.Names {
			if n == series || matches(n, series) {
				return r, true
			}
			if r.Type == "histogram" {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if n+suf == series {
						return r, true
					}
				}
			}
		}
	}
	return Row{}, false
}

func matches(pattern, name string) bool {
	if !strings.ContainsAny(pattern, "*?[") {
		return false
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}
