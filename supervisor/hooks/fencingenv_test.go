package hooks

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

func TestWriteFencingEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "kha-supervisor")
	path := filepath.Join(dir, "fencing.env")
	old := syscall.Umask(0o077) // the mode must not depend on the umask
	defer syscall.Umask(old)

	kv := map[string]string{
		"KHA_FENCING_TOKEN": "1234",
		"KHA_NODE":          "m1",
		"KHA_CLUSTER":       "prod-east",
		"KHA_NOTE":          `a "quoted" $HOME \ and ` + "`cmd`",
		"KHA_EMPTY":         "",
	}
	if err := WriteFencingEnv(path, kv); err != nil {
		t.Fatalf("WriteFencingEnv: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %o, want 644", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Written by kha-supervisor before the managed units start; do not edit.\n" +
		"KHA_CLUSTER=prod-east\n" +
		"KHA_EMPTY=\"\"\n" +
		"KHA_FENCING_TOKEN=1234\n" +
		"KHA_NODE=m1\n" +
		"KHA_NOTE=\"a \\\"quoted\\\" \\$HOME \\\\ and \\`cmd\\`\"\n"
	if string(b) != want {
		t.Fatalf("file:\n%s\nwant:\n%s", b, want)
	}

	// Replacing leaves exactly the new content and no temporary files.
	if err := WriteFencingEnv(path, map[string]string{"KHA_FENCING_TOKEN": "1300"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.HasSuffix(string(b), "\nKHA_FENCING_TOKEN=1300\n") || strings.Contains(string(b), "KHA_NODE") {
		t.Fatalf("after replace: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries after two writes, want 1: %v", len(ents), ents)
	}
}

// TestFencingEnvReadsBack sources the file with sh, which unescapes double
// quotes the way systemd's EnvironmentFile= does for these characters.
func TestFencingEnvReadsBack(t *testing.T) {
	testenv.RequireCommands(t, "sh")
	path := filepath.Join(t.TempDir(), "fencing.env")
	v := `a "quoted" $HOME \ and ` + "`cmd` 'single' %n"
	if err := WriteFencingEnv(path, map[string]string{"KHA_NOTE": v, "KHA_FENCING_TOKEN": "77"}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", `. "$1" && printf '%s|%s' "$KHA_FENCING_TOKEN" "$KHA_NOTE"`, "sh", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "77|"+v; got != want {
		t.Fatalf("read back %q, want %q", got, want)
	}
}

func TestWriteFencingEnvRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fencing.env")
	if err := os.WriteFile(path, []byte("KHA_FENCING_TOKEN=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, kv := range map[string]map[string]string{
		"newline in value": {"KHA_NODE": "m1\nEVIL=1"},
		"CR in value":      {"KHA_NODE": "m1\r"},
		"NUL in value":     {"KHA_NODE": "m\x001"},
		"bad key":          {"KHA NODE": "m1"},
		"key with =":       {"A=B": "m1"},
		"leading digit":    {"1KHA": "m1"},
		"empty key":        {"": "m1"},
	} {
		if err := WriteFencingEnv(path, kv); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// The old file is untouched and no temporary file is left.
	b, _ := os.ReadFile(path)
	if string(b) != "KHA_FENCING_TOKEN=1\n" {
		t.Fatalf("file changed by a refused write: %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries after refused writes, want 1", len(ents))
	}
}
