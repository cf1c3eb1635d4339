package build

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestThirdPartyLicensesComplete: the deb ships a licence text for every
// module `go version -m` finds in the packaged binary, and nothing is
// cut short.
func TestThirdPartyLicensesComplete(t *testing.T) {
	p := packages(t)
	bin := filepath.Join(p.debX, "usr/bin/kha-supervisor")
	mods, err := LinkedModules(context.Background(), "go", bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 10 {
		t.Fatalf("only %d modules in %s: %v", len(mods), bin, mods)
	}
	text := gunzip(t, filepath.Join(p.debX, strings.TrimPrefix(ThirdPartyLicensesPath, "/")))
	for _, m := range mods {
		head := m.Path + " " + m.Version + ": "
		i := strings.Index(text, head)
		if i < 0 {
			t.Errorf("%s lacks the licence of %s %s", ThirdPartyLicensesPath, m.Path, m.Version)
			continue
		}
		if body := text[i:min(len(text), i+400)]; !strings.Contains(strings.ToLower(body), "licen") && !strings.Contains(strings.ToLower(body), "copyright") {
			t.Errorf("%s: the section of %s does not look like a licence:\n%s", ThirdPartyLicensesPath, m.Path, body)
		}
	}
	t.Logf("%d modules, %d bytes of licence text", len(mods), len(text))
}

// TestThirdPartyLicensesRefusesAGap: a module without a licence file is an
// error naming it, never a silently shorter file.
func TestThirdPartyLicensesRefusesAGap(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("no licence here\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := licenceFiles(dir); err == nil || !strings.Contains(err.Error(), "no licence file") {
		t.Fatalf("licenceFiles on a directory without one: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "LICENSE.txt"), []byte("MIT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := licenceFiles(dir); err != nil || len(got) != 1 || got[0] != "LICENSE.txt" {
		t.Fatalf("licenceFiles = %v, %v", got, err)
	}
}
