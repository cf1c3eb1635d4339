// Package layoutdoc holds docs/architecture.md's pictures to the tree. The
// layout table: every folder that holds Go code, in every module, is covered
// by a row (its own, or its parent's row naming it in backticks), every folder
// a row names exists, and every Go file a row names is in that row's folders.
// The lifecycle diagram: the same as supervisor/state.go's.
package layoutdoc

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const (
	root = "../.."
	doc  = "docs/architecture.md"
)

// row is one line of the table: the folders in its first column (without
// the trailing slash) and its whole text.
type row struct {
	line  int
	paths []string
	text  string
}

var code = regexp.MustCompile("`([^`]+)`")

// readTable returns the rows of the table under "## Layout".
func readTable(t *testing.T) []row {
	t.Helper()
	f, err := os.Open(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "## "):
			in = l == "## Layout"
		case in && strings.HasPrefix(l, "| `"):
			cells := strings.SplitN(l, "|", 3)
			r := row{line: n, text: l}
			for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
				r.paths = append(r.paths, strings.TrimSuffix(m[1], "/"))
			}
			rows = append(rows, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) < 10 {
		t.Fatalf("%s: only %d rows found under \"## Layout\": the reader is broken", doc, len(rows))
	}
	return rows
}

// goDirs lists, relative to the root, every folder with a non-test Go file.
func goDirs(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			n := d.Name()
			if rel != "." && (strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || n == "testdata" || rel == "bin" || rel == "dist") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			seen[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

func TestLayoutTableIsTheTree(t *testing.T) {
	rows := readTable(t)
	dirs := goDirs(t)
	if len(dirs) < 20 {
		t.Fatalf("only %d folders with Go code found under %s: the walk is broken", len(dirs), root)
	}
	for _, d := range dirs {
		if d == "." {
			t.Errorf("Go code at the repository root: the layout has no row for it")
			continue
		}
		best, bestPath := -1, ""
		for i, r := range rows {
			for _, p := range r.paths {
				if (d == p || strings.HasPrefix(d, p+"/")) && len(p) > len(bestPath) {
					best, bestPath = i, p
				}
			}
		}
		if best < 0 {
			t.Errorf("%s holds Go code, but no row of %s's layout table covers it", d, doc)
			continue
		}
		if d == bestPath {
			continue
		}
		rest := strings.TrimPrefix(d, bestPath+"/")
		text := rows[best].text
		named := false
		for _, n := range []string{rest, rest + "/", d, d + "/"} {
			if strings.Contains(text, "`"+n+"`") {
				named = true
			}
		}
		if !named {
			t.Errorf("%s holds Go code; %s:%d, the row for %s/, does not name it (`%s`), nor has it a row of its own", d, doc, rows[best].line, bestPath, rest)
		}
	}
	goFile := regexp.MustCompile("^[a-z0-9_]+\\.go$")
	for _, r := range rows {
		for _, p := range r.paths {
			if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
				t.Errorf("%s:%d names the folder %s/, which does not exist", doc, r.line, p)
			}
		}
		for _, m := range code.FindAllStringSubmatch(r.text, -1) {
			if goFile.MatchString(m[1]) && !under(r.paths, m[1]) {
				t.Errorf("%s:%d names %s, which is in none of %v", doc, r.line, m[1], r.paths)
			}
		}
	}
}

// under reports whether a file named name is in one of the folders dirs or
// below them.
func under(dirs []string, name string) bool {
	for _, d := range dirs {
		found := false
		_ = filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && e.Name() == name {
				found = true
				return filepath.SkipAll
			}
			return nil
		})
		if found {
			return true
		}
	}
	return false
}

// TestLifecycleDiagram: the lifecycle diagram in architecture.md is the one
// beside the table in supervisor/state.go (TestEveryEdgeTakenIsInTheTable
// holds the code to that table).
func TestLifecycleDiagram(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## The lifecycle\n")
	_, block, ok2 := strings.Cut(after, "```\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("%s: no diagram under \"## The lifecycle\"", doc)
	}
	src, err := os.ReadFile(filepath.Join(root, "supervisor", "state.go"))
	if err != nil {
		t.Fatal(err)
	}
	var code []string
	in := false
	for _, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.HasPrefix(l, "//\t"):
			in = true
			code = append(code, strings.TrimPrefix(l, "//\t"))
		case in && l == "//":
			code = append(code, "")
		case in:
			in = false
		}
		if !in && len(code) > 0 {
			break
		}
	}
	want := strings.TrimSpace(strings.Join(code, "\n"))
	if got := strings.TrimSpace(block); got != want || want == "" {
		t.Errorf("the lifecycle diagram in %s differs from supervisor/state.go's:\n%s\nstate.go:\n%s", doc, got, want)
	}
}
