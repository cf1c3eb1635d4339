package build

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const docDir = "/usr/share/doc/kha-supervisor/"

// shippedDocs reads nfpm.yaml: the installed path of every file the packages
// take from the repository, by its repository path.
func shippedDocs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "nfpm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Contents []struct {
			Src string `json:"src"`
			Dst string `json:"dst"`
		} `json:"contents"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("nfpm.yaml: %v", err)
	}
	out := map[string]string{}
	for _, c := range f.Contents {
		if c.Src != "" && !strings.Contains(c.Src, "$") {
			out[c.Src] = c.Dst
		}
	}
	return out
}

// installedPath is where a repository file must be installed for a shipped
// document's reference to it to hold: docs/NAME next to the documents,
// packaging/examples/P and the example configuration under examples/.
func installedPath(repoPath string) (string, bool) {
	switch {
	case strings.HasPrefix(repoPath, "docs/"):
		return docDir + strings.TrimPrefix(repoPath, "docs/"), true
	case strings.HasPrefix(repoPath, "packaging/examples/"):
		return docDir + "examples/" + strings.TrimPrefix(repoPath, "packaging/examples/"), true
	case repoPath == "config.example.toml":
		return docDir + "examples/config.example.toml", true
	case repoPath == "README.md":
		return docDir + "README.md", true
	}
	return "", false
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	repoRefs = regexp.MustCompile("(?:^|[\\s`(\"])((?:docs/[A-Za-z0-9_.-]+\\.(?:md|svg))|(?:packaging/examples/[A-Za-z0-9_./-]+))")
)

// references lists the repository paths a document at docPath refers to:
// its relative Markdown links and the repository paths it names in prose.
func references(docPath, text string) []string {
	var refs []string
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[1], "://") || strings.HasPrefix(m[1], "mailto:") {
			continue
		}
		refs = append(refs, path.Clean(path.Join(path.Dir(docPath), m[1])))
	}
	for _, m := range repoRefs.FindAllStringSubmatch(text, -1) {
		refs = append(refs, strings.TrimRight(m[1], ".,;:"))
	}
	return refs
}

// TestShippedDocsLinkOnlyToShippedFiles: a document in the package that points
// at another (docs/architecture.md, packaging/examples/kubernetes/) is no use
// to an operator who has only the package, unless that one is shipped too, at
// the place the mapping above gives.
func TestShippedDocsLinkOnlyToShippedFiles(t *testing.T) {
	root := repoRoot(t)
	shipped := shippedDocs(t)
	installed := map[string]bool{}
	for _, dst := range shipped {
		installed[dst] = true
	}
	checked := 0
	for src, dst := range shipped {
		if !strings.HasSuffix(src, ".md") {
			continue
		}
		if want, _ := installedPath(src); want != dst {
			t.Errorf("%s is installed as %s; documents refer to it as if at %s", src, dst, want)
		}
		text, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range references(src, string(text)) {
			checked++
			if strings.HasSuffix(ref, "/") || isDir(filepath.Join(root, ref)) {
				if !anyUnder(installed, ref) {
					t.Errorf("%s refers to the folder %s, of which the package ships nothing", src, ref)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(root, ref)); err != nil {
				t.Errorf("%s refers to %s, which does not exist", src, ref)
				continue
			}
			want, ok := installedPath(ref)
			if !ok {
				continue // source code and the like: for developers, not operators
			}
			if !installed[want] {
				t.Errorf("%s refers to %s, which the package does not ship (want it at %s; add it to nfpm.yaml)", src, ref, want)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d references found in the shipped documents: the scan is broken", checked)
	}
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func anyUnder(installed map[string]bool, repoDir string) bool {
	want, ok := installedPath(strings.TrimSuffix(repoDir, "/") + "/")
	if !ok {
		return false
	}
	for dst := range installed {
		if strings.HasPrefix(dst, want) {
			return true
		}
	}
	return false
}

func TestReferencesFindsLinksAndPaths(t *testing.T) {
	got := references("docs/x.md", "see [a](architecture.md#safety), `packaging/examples/kubernetes/`, docs/failure-modes.md. and [b](https://e.org/x.md)")
	want := []string{"docs/architecture.md", "packaging/examples/kubernetes/", "docs/failure-modes.md"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("references = %q, want %q", got, want)
	}
}
