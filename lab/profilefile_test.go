package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A lab brought up with a profile runs it for every later command that
// names none: `kha-lab up --profile fast-kill` then `kha-lab run all` must
// neither rewrite a scenario's configuration with "fast" nor label the
// report "fast" (it did on 3 December).
func TestProfileResolution(t *testing.T) {
	dir := t.TempDir()
	l, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Profile().Name != Fast.Name {
		t.Fatalf("a new lab runs profile %q, want fast", l.Profile().Name)
	}
	kill, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", Profile: FastKill})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := kill.saveProfile(); err != nil {
		t.Fatal(err)
	}
	later, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true"})
	if err != nil {
		t.Fatal(err)
	}
	if later.Profile() != FastKill {
		t.Fatalf("a later command on a fast-kill lab runs %+v", later.Profile())
	}
	if _, err := New(Config{Prefix: "khtest", StateDir: dir, Binary: "/bin/true", Profile: Default}); err == nil || !strings.Contains(err.Error(), "down") {
		t.Fatalf("asking default of a fast-kill lab: err = %v, want a refusal naming `kha-lab down`", err)
	}
}
