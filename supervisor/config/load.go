package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
)

// maxFileSize bounds every file the configuration reads (the config itself,
// the password file, TLS files): `-c /dev/zero` or a wrong path to a large
// file must be refused, not read forever.
const maxFileSize = 1 << 20

// Load reads the file at path, decodes it strictly on top of Default(),
// fills the node name from the host name when the file leaves it empty, and
// validates the result (see Validate and docs/configuration.md). Every
// refusal is a *Error naming the file; Load never panics.
func Load(path string) (Config, error) {
	d, cfg, info, err := readDocument(path)
	if err != nil {
		return Config{}, err
	}
	if err := cfg.check(d); err != nil {
		return Config{}, err
	}
	if err := checkMainFileMode(d.file, info.Mode(), cfg, d); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// readDocument reads and strictly decodes the file at path (syntax, unknown
// keys, types), and fills in the node name from the host name when the file
// leaves it empty. Load and LoadClient validate the result each their way.
func readDocument(path string) (*document, Config, fs.FileInfo, error) {
	file := path
	if file == "" {
		file = `""` // an empty -c argument still gets a visible culprit
	}
	data, info, err := readLimited(path)
	if err != nil {
		return nil, Config{}, nil, &Error{File: file, Msg: "cannot read the configuration file: " + describeIOErr(err), Err: err}
	}
	d, err := decode(file, data)
	if err != nil {
		return nil, Config{}, nil, err
	}
	cfg := d.cfg
	cfg.Path = path
	if cfg.Node == "" {
		// Lower-cased like the kubelet does, so that "M1" and "m1" are one
		// member and the name is a valid etcd key component.
		h, err := os.Hostname()
		if err != nil {
			return nil, Config{}, nil, &Error{File: file, Key: "node", Value: `""`,
				Msg: "not set and the host name cannot be read; set node explicitly", Err: err}
		}
		cfg.Node = strings.ToLower(h)
	}
	return d, cfg, info, nil
}

// readLimited reads a regular file of at most maxFileSize bytes. It refuses
// anything else before opening it: opening a FIFO blocks, and opening a
// watchdog device arms it (a mistyped path must never do that). The mode
// returned comes from the open descriptor, so a permission check judges the
// very file that was read.
func readLimited(path string) ([]byte, fs.FileInfo, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is a %s, not a regular file", path, fileType(info.Mode()))
	}
	// O_NONBLOCK: should the path be swapped for a FIFO after Stat, open
	// still returns at once and the check below refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is a %s, not a regular file", path, fileType(info.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxFileSize {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileSize)
	}
	return data, info, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// describeIOErr drops the "open PATH:" prefix of a *PathError: the message
// names the path already.
func describeIOErr(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// document is one decoded file, kept so that later checks can point at the
// line of the key they refuse.
type document struct {
	file string
	text string
	md   toml.MetaData
	data map[string]any
	cfg  Config
}

// decode runs the strict decoding in three passes: TOML syntax into a plain
// map (BurntSushi's parser), every key in document order against the schema
// (unknown keys, wrong types, bad durations), then the real decode on top of
// Default(). The second pass exists because the decoder's own type errors are
// plain strings and it matches struct fields case-insensitively; checking
// first gives one typed error with key, line and value, and exact key names.
func decode(file string, data []byte) (*document, error) {
	d := &document{file: file, text: string(data)}
	md, err := safeDecode(d.text, &d.data)
	if err != nil {
		return nil, d.decodeErr(err)
	}
	d.md = md
	for _, k := range md.Keys() {
		if err := d.checkKey(k); err != nil {
			return nil, err
		}
	}
	d.cfg = Default()
	md2, err := safeDecode(d.text, &d.cfg)
	if err != nil {
		return nil, d.decodeErr(err) // not expected after the checks above
	}
	if u := md2.Undecoded(); len(u) > 0 {
		return nil, &Error{File: file, Key: u[0].String(), Line: d.line(u[0]), Msg: "unknown key"}
	}
	if err := d.resolveProfile(); err != nil {
		return nil, err
	}
	// syslog and most tools say "warning"; slog and this file say "warn".
	if d.cfg.Log.Level == "warning" {
		d.cfg.Log.Level = "warn"
	}
	// "key = []" and a missing key mean the same; make them equal values too.
	cv := reflect.ValueOf(&d.cfg).Elem()
	for _, n := range schema.leaves() {
		if f := cv.FieldByIndex(n.index); n.kind == kindStrings && f.Len() == 0 {
			f.SetZero()
		}
	}
	return d, nil
}

// safeDecode is toml.Decode that turns a panic in the parser into an error:
// a configuration file must be refused, never crash the daemon.
func safeDecode(text string, v any) (md toml.MetaData, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("TOML decoder failed: %v", r)
		}
	}()
	return toml.Decode(text, v)
}

// decodeErr turns a BurntSushi error into an *Error.
func (d *document) decodeErr(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return &Error{File: d.file, Msg: "TOML: " + err.Error(), Err: err}
	}
	msg := "TOML syntax: " + pe.Message
	if pe.LastKey != "" {
		msg += fmt.Sprintf(" (after key %s)", pe.LastKey)
	}
	e := &Error{File: d.file, Line: pe.Position.Line, Msg: msg, Err: err}
	if s, l := pe.Position.Start, pe.Position.Len; l > 0 && s >= 0 && s+l <= len(d.text) && s+l > s {
		e.Value = truncate(strconv.Quote(d.text[s : s+l]))
		// The parser counts an offending newline as the start of the next
		// line; the line the operator must edit is the one it ends.
		e.Line = 1 + strings.Count(d.text[:s], "\n")
	}
	return e
}

// checkKey checks one key of the file against the schema.
func (d *document) checkKey(k toml.Key) error {
	n := schema
	for i, part := range k {
		c := n.child(part)
		if c == nil {
			key := k[:i+1]
			e := &Error{File: d.file, Key: key.String(), Line: d.line(key), Msg: unknownKeyMsg(n, part)}
			if v := d.value(key); v != nil {
				if _, table := v.(map[string]any); !table {
					e.Value = renderRaw(v)
				}
			}
			return e
		}
		n = c
		if n.kind != kindTable {
			// A leaf; if the key goes deeper, the leaf was written as a
			// table, which checkValue reports as a wrong type.
			key := k[:i+1]
			v := d.value(key)
			if msg := n.checkValue(v); msg != "" {
				return &Error{File: d.file, Key: n.key, Line: d.line(key), Value: renderRaw(v), Msg: msg}
			}
			return nil
		}
	}
	v := d.value(k)
	if msg := n.checkValue(v); msg != "" {
		return &Error{File: d.file, Key: n.key, Line: d.line(k), Value: renderRaw(v), Msg: msg}
	}
	return nil
}

func unknownKeyMsg(table *node, name string) string {
	var names, near []string
	for _, c := range table.children {
		if strings.EqualFold(c.name, name) {
			return fmt.Sprintf("unknown key; did you mean %q? (keys are case-sensitive)", c.name)
		}
		names = append(names, c.name)
		if d := EditDistance(name, c.name); d <= 2 && 2*d < len(name) {
			near = append(near, quote(c.name))
		}
	}
	where := "at the top level"
	if table.key != "" {
		where = "in [" + table.key + "]"
	}
	if len(near) > 0 {
		return fmt.Sprintf("unknown key %s; did you mean %s?", where, strings.Join(near, " or "))
	}
	return fmt.Sprintf("unknown key; valid keys %s: %s", where, strings.Join(names, ", "))
}

// EditDistance is the Levenshtein distance of two short strings: the
// nearest-key suggestion here, and the command line's suggestions of flags
// and node names.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// value returns the decoded value at key, nil when absent.
func (d *document) value(key []string) any {
	var v any = d.data
	for _, part := range key {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		if v, ok = m[part]; !ok {
			return nil
		}
	}
	return v
}

// lineOf is the line where a dotted schema key is set in the file, 0 when
// the file does not set it (the value is a default) or there is no file.
func (d *document) lineOf(key string) int {
	if d == nil {
		return 0
	}
	parts := strings.Split(key, ".")
	if !d.md.IsDefined(parts...) {
		return 0
	}
	return d.line(parts)
}

// line finds the line of a key with BurntSushi's own position data, which
// the MetaData does not export: it decodes the text again into a struct
// built to hold only that key, whose leaf refuses every value. The decoder
// then reports its refusal as a ParseError positioned at the key. Only used
// on the error path.
func (d *document) line(key []string) int {
	if l := d.probeLine(key); l > 0 {
		return l
	}
	// A table created implicitly by a dotted key ("a.b.c = 1" creates a.b)
	// has no position of its own: point at the first key inside it.
	for _, k := range d.md.Keys() {
		if len(k) > len(key) && slices.Equal(k[:len(key)], key) {
			return d.probeLine(k)
		}
	}
	return 0
}

func (d *document) probeLine(key []string) (line int) {
	defer func() {
		if recover() != nil {
			line = 0 // reflect.StructOf refused an odd key; the line is optional
		}
	}()
	if len(key) == 0 {
		return 0
	}
	t := reflect.TypeFor[probe]()
	for i := len(key) - 1; i >= 0; i-- {
		if strings.ContainsRune(key[i], ',') {
			return 0 // the decoder splits struct tags on commas
		}
		t = reflect.StructOf([]reflect.StructField{{
			Name: "F", Type: t, Tag: reflect.StructTag("toml:" + strconv.Quote(key[i])),
		}})
	}
	_, err := toml.Decode(d.text, reflect.New(t).Interface())
	var pe toml.ParseError
	if errors.As(err, &pe) && pe.Message == errProbe.Error() {
		return pe.Position.Line
	}
	return 0
}

type probe struct{}

var errProbe = errors.New("position probe")

func (*probe) UnmarshalTOML(any) error { return errProbe }
