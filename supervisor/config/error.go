package config

import (
	"strconv"
	"strings"
)

// Error is every refusal Load and Validate return: one culprit, named well
// enough that an operator can fix the file without reading code. Callers and
// tests find it with errors.As.
type Error struct {
	File  string // the configuration file refused (never empty from Load)
	Key   string // dotted TOML key, e.g. "lease.ttl"; empty for file-level problems (syntax, access)
	Line  int    // 1-based line of Key (or of the syntax error) in File; 0 when unknown or defaulted
	Value string // the offending value as TOML text, e.g. `"1.5s"`; empty when there is none
	Msg   string // what is wrong and, where it helps, what to do
	Err   error  // underlying cause (I/O error, TOML parse error, fencing.Window error), if any
	// Related are the keys of a refused relation between keys (Key among
	// them); the check appends each with its line or origin to Msg, so the
	// operator sees which one the file changed.
	Related []string
}

// Error renders one line, compiler style:
//
//	/etc/kha-supervisor/config.toml:12: lease.ttl = "1500ms": must be a whole number of seconds
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteString(" = ")
			b.WriteString(e.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Key == "" && e.Value != "" {
		b.WriteString(" (near ")
		b.WriteString(e.Value)
		b.WriteByte(')')
	}
	// One line, always: a value or a library message may carry a newline or
	// a control character, and a refusal must fit one log line.
	return oneLine(b.String())
}

// Unwrap exposes the cause, so errors.Is(err, fs.ErrNotExist) works.
func (e *Error) Unwrap() error { return e.Err }

// oneLine escapes control characters so that s stays on one line.
func oneLine(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool {
	return r < 0x20 || r == 0x7f || r == '\u2028' || r == '\u2029' || r == 0x85
}
