// Package logcatalog finds the ERROR and WARN messages the product logs, read
// from its source with go/parser, so that docs/troubleshooting.md can be
// checked against the code: every message an operator can meet is explained
// there, and nothing is explained that the code no longer says.
package logcatalog

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Message is one logged message.
type Message struct {
	Level string // ERROR or WARN
	Text  string
	Where []string // file:line, relative to the root
}

// Skip are the trees that are not the product: the lab and its command, test
// helpers, build tooling.
var Skip = []string{"lab", "cmd/kha-lab", "internal/etcdtest", "internal/etcdload", "internal/supervisortest", "internal/nspawn", "internal/netns", "internal/tcpproxy", "packaging/mkpkg", ".git"}

// Scan reads every non-test Go file under root outside Skip and returns the
// messages of calls X.Error("...", ...), X.Warn("...", ...) and their
// Context variants (X.ErrorContext(ctx, "...")) whose message is a string
// constant, sorted by text; dynamic counts the calls whose message is not.
func Scan(root string) (msgs []Message, dynamic []string, err error) {
	byKey := map[string]*Message{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			for _, s := range Skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			level, arg := logCall(call)
			if level == "" {
				return true
			}
			pos := fset.Position(call.Pos())
			where := filepath.ToSlash(rel) + ":" + strconv.Itoa(pos.Line)
			lit, ok := call.Args[arg].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				dynamic = append(dynamic, where)
				return true
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			k := level + "\x00" + text
			if byKey[k] == nil {
				byKey[k] = &Message{Level: level, Text: text}
			}
			byKey[k].Where = append(byKey[k].Where, where)
			return true
		})
		return nil
	})
	for _, m := range byKey {
		msgs = append(msgs, *m)
	}
	sort.Slice(msgs, func(i, j int) bool {
		if msgs[i].Text != msgs[j].Text {
			return msgs[i].Text < msgs[j].Text
		}
		return msgs[i].Level < msgs[j].Level
	})
	return msgs, dynamic, err
}

// logCall says whether call is a slog-style Error or Warn call, and which
// argument is its message.
func logCall(call *ast.CallExpr) (level string, msgArg int) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", 0
	}
	if x, ok := sel.X.(*ast.Ident); ok && x.Name == "http" {
		return "", 0 // http.Error writes a response, not a log line
	}
	switch sel.Sel.Name {
	case "Error":
		level = "ERROR"
	case "Warn":
		level = "WARN"
	case "ErrorContext":
		level, msgArg = "ERROR", 1
	case "WarnContext":
		level, msgArg = "WARN", 1
	default:
		return "", 0
	}
	// X.Error(msg, key, value, ...): a message and pairs, or a message and
	// the pairs spread (X.Warn(msg, args...)). t.Error(...) in non-test
	// helpers and errors.Error() have other shapes.
	spread := call.Ellipsis.IsValid() && len(call.Args) == msgArg+2
	if len(call.Args) <= msgArg || ((len(call.Args)-msgArg)%2 != 1 && !spread) {
		return "", 0
	}
	return level, msgArg
}
