package config

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// kind is what TOML value a key takes. The schema below is derived from the
// Config struct's toml tags, so the key list used for strict decoding, for
// Describe and for the example-file test can never drift from the struct.
type kind int

const (
	kindTable kind = iota
	kindString
	kindStrings
	kindInt
	kindFloat
	kindBool
	kindDuration
)

// node is one key of the schema: a table or a leaf.
type node struct {
	key      string  // dotted key, "" for the root
	name     string  // last component
	kind     kind    //
	index    []int   // field index path from Config
	children []*node // tables only, in struct order
}

func (n *node) child(name string) *node {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	schema       = buildSchema(reflect.TypeFor[Config](), "", nil)
)

// buildSchema panics on a field type it does not know: that is a programming
// error in this package, caught by any test, never a reaction to input.
func buildSchema(t reflect.Type, prefix string, index []int) *node {
	n := &node{key: prefix, kind: kindTable, index: index}
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		n.name = prefix[i+1:]
	} else {
		n.name = prefix
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("toml")
		if tag == "" || tag == "-" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		idx := append(append([]int(nil), index...), i)
		var c *node
		switch {
		case f.Type == durationType:
			c = &node{kind: kindDuration}
		case f.Type.Kind() == reflect.Struct:
			c = buildSchema(f.Type, key, idx)
		case f.Type.Kind() == reflect.String:
			c = &node{kind: kindString}
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.String:
			c = &node{kind: kindStrings}
		case f.Type.Kind() == reflect.Int:
			c = &node{kind: kindInt}
		case f.Type.Kind() == reflect.Float64:
			c = &node{kind: kindFloat}
		case f.Type.Kind() == reflect.Bool:
			c = &node{kind: kindBool}
		default:
			panic(fmt.Sprintf("config: field %s has unsupported type %s", key, f.Type))
		}
		c.key, c.name, c.index = key, tag, idx
		n.children = append(n.children, c)
	}
	return n
}

// leaves lists every leaf key in struct order.
func (n *node) leaves() []*node {
	var out []*node
	for _, c := range n.children {
		if c.kind == kindTable {
			out = append(out, c.leaves()...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// lookupKey finds a schema node by dotted key.
func lookupKey(key string) *node {
	n := schema
	for part := range strings.SplitSeq(key, ".") {
		if n = n.child(part); n == nil {
			return nil
		}
	}
	return n
}

// checkValue checks that a decoded TOML value fits a schema node. It returns
// the message for an *Error, or "" when the value fits.
func (n *node) checkValue(v any) string {
	switch n.kind {
	case kindTable:
		if _, ok := v.(map[string]any); !ok {
			return "wrong type: want a table, got " + typeName(v)
		}
	case kindString:
		if _, ok := v.(string); !ok {
			return "wrong type: want a string, got " + typeName(v)
		}
	case kindStrings:
		a, ok := v.([]any)
		if !ok {
			return "wrong type: want an array of strings, got " + typeName(v)
		}
		for i, e := range a {
			if _, ok := e.(string); !ok {
				return fmt.Sprintf("wrong type: entry %d is %s %s, want a string", i+1, article(typeName(e)), typeName(e))
			}
		}
	case kindInt:
		if _, ok := v.(int64); !ok {
			return "wrong type: want an integer, got " + typeName(v)
		}
	case kindFloat:
		switch x := v.(type) {
		case float64:
		case int64:
			// The decoder refuses integers a float64 cannot hold exactly.
			if x > 1<<53 || x < -(1<<53) {
				return "integer too large for a float; write it as a float"
			}
		default:
			return "wrong type: want a number, got " + typeName(v)
		}
	case kindBool:
		if _, ok := v.(bool); !ok {
			return "wrong type: want true or false, got " + typeName(v)
		}
	case kindDuration:
		s, ok := v.(string)
		if !ok {
			return `wrong type: want a duration string with a unit such as "10s" or "500ms", got ` + typeName(v)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return `not a duration: want a Go duration such as "1.5s", "500ms" or "2m"`
		}
	}
	return ""
}

func article(s string) string {
	if s != "" && strings.ContainsRune("aeiou", rune(s[0])) {
		return "an"
	}
	return "a"
}

// typeName names a decoded TOML value's type the way the TOML spec does.
func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case time.Time:
		return "datetime"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	case []map[string]any:
		return "array of tables"
	case nil:
		return "nothing"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// maxValueText bounds a value quoted in an error message: a refusal must
// stay one readable line even for a megabyte-long string.
const maxValueText = 120

// renderRaw writes a decoded TOML value back as TOML text, for messages.
func renderRaw(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = quote(x)
	case int64:
		s = strconv.FormatInt(x, 10)
	case float64:
		s = formatFloat(x)
	case bool:
		s = strconv.FormatBool(x)
	case time.Time:
		s = x.Format(time.RFC3339Nano)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = renderRaw(e)
		}
		s = "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = quoteKey(k) + " = " + renderRaw(x[k])
		}
		s = "{" + strings.Join(parts, ", ") + "}"
	case []map[string]any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = renderRaw(e)
		}
		s = "[" + strings.Join(parts, ", ") + "]"
	default:
		s = fmt.Sprintf("%v", v)
	}
	return truncate(s)
}

func truncate(s string) string {
	if len(s) <= maxValueText {
		return s
	}
	cut := maxValueText
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// renderField writes one Config field as TOML text (for Describe and for
// messages about effective values).
func renderField(v reflect.Value) string {
	if v.Type() == durationType {
		return quote(time.Duration(v.Int()).String())
	}
	switch v.Kind() {
	case reflect.String:
		return quote(v.String())
	case reflect.Slice:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = quote(v.Index(i).String())
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Int:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Float64:
		return formatFloat(v.Float())
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	}
	return fmt.Sprintf("%v", v.Interface())
}

// formatFloat writes a TOML float: always with a fraction or an exponent so
// that it reads back as a float, and with TOML's names for the specials.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// quote writes s as a TOML basic string. Go's strconv.Quote is not TOML
// (TOML has no \x escapes), hence this.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r) // invalid UTF-8 arrives here as U+FFFD
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// quoteKey writes a key component bare when TOML allows it, quoted otherwise.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, r := range k {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return quote(k)
		}
	}
	return k
}
