package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedDocsCurrent fails when a checked-in file that gen-docs
// writes (completions, kha-supervisor(8), README's tables) is not what the
// command tree gives today.
func TestGeneratedDocsCurrent(t *testing.T) {
	files, err := generatedDocs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("gen-docs made %d files, want the 3 completions, the man page and README.md", len(files))
	}
	for _, f := range files {
		got, err := os.ReadFile(filepath.Join("../..", f.path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.data) {
			t.Errorf("%s is stale: run `go generate ./cmd/kha-supervisor` and commit the result", f.path)
		}
	}
}

// TestGenDocsWrites runs the hidden command itself into a copy of the
// sources.
func TestGenDocsWrites(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{manTemplate, readme} {
		b, err := os.ReadFile(filepath.Join("../..", p))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "packaging/completion"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, "gen-docs", dir)
	if code != exitOK {
		t.Fatalf("gen-docs: exit %d: %s%s", code, out, errs)
	}
	for _, p := range []string{manPage, "packaging/completion/kha-supervisor.bash", "packaging/completion/kha-supervisor.zsh", "packaging/completion/kha-supervisor.fish"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("gen-docs did not write %s: %v", p, err)
		}
	}
}
