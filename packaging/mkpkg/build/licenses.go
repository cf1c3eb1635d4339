package build

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Module is one Go module linked into a binary.
type Module struct {
	Path, Version string
}

// LinkedModules lists the modules `go version -m` records in bin (after
// replacements), in the order it prints them.
func LinkedModules(ctx context.Context, goCmd, bin string) ([]Module, error) {
	out, err := exec.CommandContext(ctx, goCmd, "version", "-m", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("go version -m %s: %w", bin, err)
	}
	var mods []Module
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "dep":
			mods = append(mods, Module{f[1], f[2]})
		case len(f) >= 3 && f[0] == "=>" && len(mods) > 0:
			// The replacement is what was linked.
			mods[len(mods)-1] = Module{f[1], f[2]}
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("go version -m %s: no modules listed (built without module information?)", bin)
	}
	return mods, nil
}

// licenceFile matches the files at a module's root that carry its licence
// terms (golang.org/x modules add PATENTS, Apache-2.0 ones often NOTICE).
var licenceFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|notice|patents)([._-].*)?$`)

// ThirdPartyLicenses returns the licence texts of every module linked into
// bin, read from the module cache (downloaded there first if missing), for
// /usr/share/doc/kha-supervisor/: a static binary carries their code, so the
// package must carry their terms. A module without a licence file is an
// error, never a silent gap.
func ThirdPartyLicenses(ctx context.Context, goCmd, root, bin string) ([]byte, error) {
	mods, err := LinkedModules(ctx, goCmd, bin)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "Licences of the Go modules statically linked into /usr/bin/%s and\n", Name)
	fmt.Fprintf(&b, "/usr/libexec/%s/kha-guard, which links a part of the same modules\n", Name)
	fmt.Fprintf(&b, "(`go version -m /usr/bin/%s` lists them).\n", Name)
	for _, m := range mods {
		dir, err := moduleDir(ctx, goCmd, root, m)
		if err != nil {
			return nil, err
		}
		files, err := licenceFiles(dir)
		if err != nil {
			return nil, fmt.Errorf("module %s %s: %w", m.Path, m.Version, err)
		}
		for _, f := range files {
			text, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "\n%s\n%s %s: %s\n%s\n\n", strings.Repeat("=", 78), m.Path, m.Version, f, strings.Repeat("=", 78))
			b.Write(bytes.TrimSpace(text))
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

func licenceFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && licenceFile.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no licence file (LICENSE, COPYING, ...) in %s", dir)
	}
	slices.Sort(out)
	return out, nil
}

// moduleDir is where the module cache holds m; `go mod download` puts it
// there if it is not yet.
func moduleDir(ctx context.Context, goCmd, root string, m Module) (string, error) {
	cmd := exec.CommandContext(ctx, goCmd, "mod", "download", "-json", m.Path+"@"+m.Version)
	cmd.Dir = root
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr != nil || info.Dir == "" {
		return "", fmt.Errorf("module %s %s: not in the module cache and cannot be downloaded: %v %s", m.Path, m.Version, err, info.Error)
	}
	return info.Dir, nil
}
