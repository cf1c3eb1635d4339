// Package funclen holds one test: no non-test function in the daemon's core or its command
// is longer than maxLines, so that each can be read (and reviewed) whole.
package funclen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxLines counts a function from its func keyword to its closing brace.
const maxLines = 80

// roots are the trees held to the rule, relative to this directory. A root
// that does not exist (yet) is skipped; the daemon's own are required.
var roots = []struct {
	dir      string
	required bool
}{
	{"../../supervisor", true},
	{"../../fencing", true},
	{"../../daemon", true},
	{"../../group", false},
	{"../../cmd/kha-supervisor", true},
}

func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	for _, r := range roots {
		if _, err := os.Stat(r.dir); err != nil {
			if r.required {
				t.Fatalf("%s: %v", r.dir, err)
			}
			continue
		}
		err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			files++
			for _, o := range longFuncs(t, fset, p) {
				t.Errorf("%s (limit %d lines: split it)", o, maxLines)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files == 0 {
		t.Fatal("no Go files found: the roots are wrong")
	}
}

// longFuncs lists the functions in file p longer than maxLines.
func longFuncs(t *testing.T, fset *token.FileSet, p string) []string {
	f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", p, err)
	}
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxLines {
			out = append(out, fmt.Sprintf("%s: %s is %d lines", p, fd.Name.Name, n))
		}
	}
	return out
}
