// Package build builds kha-supervisor's deb and rpm packages with nfpm,
// used as a library: `make packages` runs it through packaging/mkpkg (this
// module's command), and the tests call Build into a temporary directory.
// It is its own module, so that nfpm and what it pulls in (go-git among
// them) stay out of the product's go.mod.
//
// The static parts live in the repository's packaging/: nfpm.yaml (metadata and the file
// list), systemd/kha-supervisor.service, scripts/{deb,rpm}/, man/, completion/.
// Build adds what must be generated: the binary (go build, stamped with the
// version), the drop-ins for the default managed units (rendered by
// packaging/dropin, the same code `kha-supervisor install-dropins` uses), the
// compressed man pages and the Debian changelog.
//
// Builds are reproducible: every timestamp is SourceDateEpoch, the binary is
// built with -trimpath and an empty build id, gzip streams carry no name or
// time, file modes are set explicitly, and the rpm build host is fixed.
package build

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
	_ "github.com/goreleaser/nfpm/v2/rpm" // registers the rpm packager

	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// Name is the package name.
const Name = "kha-supervisor"

// BuildHost is written into the rpm header instead of this machine's name.
const BuildHost = "kha-supervisor-build"

// Options says what to build.
type Options struct {
	Root    string    // repository root (holds go.mod); required
	OutDir  string    // where the packages go; required
	Version string    // package version; empty: GitVersion(Root)
	Epoch   time.Time // timestamp of every file; zero: SourceDateEpoch(Root)
	Arches  []string  // GOARCH values; empty: amd64 and arm64
	Formats []string  // "deb", "rpm"; empty: both
	// Binaries maps a GOARCH to an already built binary to package instead
	// of building one (built with Version stamped, and kha-guard beside it:
	// BuildBinary writes both).
	Binaries map[string]string
	Go       string       // the go command; empty: "go"
	Log      *slog.Logger // nil: slog.Default()
}

// Artifact is one package written.
type Artifact struct {
	Path    string
	Format  string // deb or rpm
	Arch    string // GOARCH
	Version string
	Size    int64
	SHA256  string
}

// Build writes one package per format and architecture into o.OutDir.
func Build(ctx context.Context, o Options) ([]Artifact, error) {
	if o.Root == "" || o.OutDir == "" {
		return nil, fmt.Errorf("packaging: Root and OutDir are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if len(o.Arches) == 0 {
		o.Arches = []string{"amd64", "arm64"}
	}
	if len(o.Formats) == 0 {
		o.Formats = []string{"deb", "rpm"}
	}
	var err error
	if o.Version == "" {
		if o.Version, err = GitVersion(ctx, o.Root); err != nil {
			return nil, fmt.Errorf("packaging: version: %w", err)
		}
	}
	if err := CheckVersion(o.Version); err != nil {
		return nil, fmt.Errorf("packaging: %w", err)
	}
	if o.Epoch.IsZero() {
		if o.Epoch, err = SourceDateEpoch(ctx, o.Root); err != nil {
			return nil, fmt.Errorf("packaging: %w", err)
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("packaging: %w", err)
	}
	stage, err := os.MkdirTemp("", "kha-pkg-stage-")
	if err != nil {
		return nil, fmt.Errorf("packaging: %w", err)
	}
	defer os.RemoveAll(stage)

	if err := stageCommon(o, stage); err != nil {
		return nil, fmt.Errorf("packaging: stage files: %w", err)
	}
	var out []Artifact
	for _, arch := range o.Arches {
		bin := o.Binaries[arch]
		if bin == "" {
			bin = filepath.Join(stage, "bin-"+arch, Name)
			if err := BuildBinary(ctx, o.Go, o.Root, arch, o.Version, bin); err != nil {
				return nil, fmt.Errorf("packaging: %w", err)
			}
		}
		if _, err := os.Stat(GuardBeside(bin)); err != nil {
			return nil, fmt.Errorf("packaging: %s must lie beside %s (BuildBinary writes both): %w", GuardName, bin, err)
		}
		if err := stageLicenses(ctx, o, stage, bin, arch); err != nil {
			return nil, fmt.Errorf("packaging: %w", err)
		}
		for _, format := range o.Formats {
			a, err := pack(o, stage, bin, arch, format)
			if err != nil {
				return nil, fmt.Errorf("packaging: %s %s: %w", format, arch, err)
			}
			o.Log.Info("package written", "path", a.Path, "size", a.Size, "sha256", a.SHA256)
			out = append(out, a)
		}
	}
	return out, nil
}

// GuardName is kha-guard's file name. BuildBinary writes it beside
// kha-supervisor, and Build packages the one beside each binary it uses.
const GuardName = "kha-guard"

// GuardBeside is where kha-guard is expected for the kha-supervisor binary bin.
func GuardBeside(bin string) string { return filepath.Join(filepath.Dir(bin), GuardName) }

// BuildBinary cross-compiles cmd/kha-supervisor for linux/arch into dst with
// the version stamped into `kha-supervisor version`, and cmd/kha-guard beside
// it (GuardBeside). Everything that could differ between two machines or two
// runs is pinned: no cgo, trimmed paths, no VCS stamping (the version carries
// the commit), an empty build id, and the baseline instruction set of each
// architecture.
func BuildBinary(ctx context.Context, goCmd, root, arch, version, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	for _, b := range []struct{ pkg, out string }{
		{"./cmd/kha-supervisor", dst},
		{"./cmd/kha-guard", GuardBeside(dst)},
	} {
		cmd := exec.CommandContext(ctx, goCmd, "build", "-trimpath", "-buildvcs=false",
			"-ldflags", "-s -w -buildid= -X main.version="+version,
			"-o", b.out, b.pkg)
		cmd.Dir = root
		// GOWORK=off: what ships is built from the root go.mod alone, whatever
		// versions the tooling modules of go.work would select.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch,
			"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOWORK=off")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s (GOARCH=%s): %w\n%s", b.pkg, arch, err, stderr.String())
		}
	}
	return nil
}

// stageCommon writes the generated, architecture-independent files.
func stageCommon(o Options, stage string) error {
	date := o.Epoch.Format("2006-01-02")
	for _, m := range []struct{ src, dst string }{
		{"packaging/man/kha-supervisor.8", "kha-supervisor.8.gz"},
		{"packaging/man/kha-supervisor.toml.5", "kha-supervisor.toml.5.gz"},
	} {
		b, err := os.ReadFile(filepath.Join(o.Root, m.src))
		if err != nil {
			return err
		}
		// The pages carry the version and date of this build, not of the
		// day they were written.
		b = bytes.ReplaceAll(b, []byte("@VERSION@"), []byte(o.Version))
		b = bytes.ReplaceAll(b, []byte("@DATE@"), []byte(date))
		if err := writeGzip(filepath.Join(stage, m.dst), b); err != nil {
			return err
		}
	}
	if err := writeGzip(filepath.Join(stage, "changelog.gz"), debianChangelog(o.Version, o.Epoch)); err != nil {
		return err
	}
	def := config.Default()
	for _, u := range def.Units.Managed {
		b, err := dropin.Render(dropin.Params{Unit: u, StopTimeout: def.Units.StopTimeout})
		if err != nil {
			return err
		}
		p := filepath.Join(stage, "dropins", u+".conf")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// ThirdPartyLicensesPath is where the package ships the licences of the
// modules linked into the binary (see ThirdPartyLicenses).
const ThirdPartyLicensesPath = "/usr/share/doc/kha-supervisor/third-party-licenses.gz"

func licensesFile(arch string) string { return "third-party-licenses-" + arch + ".gz" }

// stageLicenses writes the licences of the modules linked into bin.
func stageLicenses(ctx context.Context, o Options, stage, bin, arch string) error {
	b, err := ThirdPartyLicenses(ctx, o.Go, o.Root, bin)
	if err != nil {
		return err
	}
	return writeGzip(filepath.Join(stage, licensesFile(arch)), b)
}

// Maintainer is the package maintainer (deb Maintainer, rpm Packager) and
// the changelog's signer.
const Maintainer = "kha-supervisor maintainers <maintainers@kha-supervisor.example>"

// debianChangelog is the one-entry changelog a native Debian package must
// carry (/usr/share/doc/PKG/changelog.gz), dated by the build's epoch.
func debianChangelog(version string, epoch time.Time) []byte {
	return []byte(fmt.Sprintf(`%s (%s) stable; urgency=medium

  * Package build of %s.
    The change history of the project is in its git repository.

 -- %s  %s
`, Name, version, version, Maintainer, epoch.Format(time.RFC1123Z)))
}

// writeGzip compresses b at the best level (what lintian expects of man
// pages and changelogs) with no file name or time in the header: `gzip -9n`.
func writeGzip(path string, b []byte) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(b); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// pack builds one package from packaging/nfpm.yaml.
func pack(o Options, stage, bin, arch, format string) (Artifact, error) {
	vars := map[string]string{
		"VERSION": o.Version,
		"ARCH":    arch,
		"BIN":     bin,
		"GUARD":   GuardBeside(bin),
		"STAGE":   stage,
	}
	f, err := os.Open(filepath.Join(o.Root, "packaging", "nfpm.yaml"))
	if err != nil {
		return Artifact{}, err
	}
	defer f.Close()
	cfg, err := nfpm.ParseWithEnvMapping(f, func(k string) string {
		if v, ok := vars[k]; ok {
			return v
		}
		// Only the variables above: the process environment must not leak
		// into a package.
		return "${" + k + "}"
	})
	if err != nil {
		return Artifact{}, fmt.Errorf("packaging/nfpm.yaml: %w", err)
	}
	info, err := cfg.Get(format)
	if err != nil {
		return Artifact{}, err
	}
	info = nfpm.WithDefaults(info)
	info.Maintainer = Maintainer
	info.RPM.Packager = Maintainer
	info.RPM.BuildHost = BuildHost
	info.MTime = o.Epoch

	// The drop-ins for the default managed units, one per unit. rpm only
	// removes directories a package owns, so there the package owns each
	// UNIT.d/ too (shared ownership with the unit's own package is fine).
	def := config.Default()
	for _, u := range def.Units.Managed {
		p := dropin.Path("/usr/lib/systemd/system", u)
		if format == "rpm" {
			info.Contents = append(info.Contents, &files.Content{
				Destination: filepath.Dir(p),
				Type:        files.TypeDir,
				FileInfo:    &files.ContentFileInfo{Mode: 0o755},
			})
		}
		info.Contents = append(info.Contents, &files.Content{
			Source:      filepath.Join(stage, "dropins", u+".conf"),
			Destination: p,
			Type:        files.TypeFile,
			FileInfo:    &files.ContentFileInfo{Mode: 0o644},
		})
	}
	info.Contents = append(info.Contents, &files.Content{
		Source:      filepath.Join(stage, licensesFile(arch)),
		Destination: ThirdPartyLicensesPath,
		Type:        files.TypeFile,
		FileInfo:    &files.ContentFileInfo{Mode: 0o644},
	})
	if format == "rpm" {
		// The description is written for dpkg: its first line is the
		// synopsis (rpm has the Summary tag for that) and a lone "." is its
		// paragraph separator; rpm shows text as it is.
		_, body, _ := strings.Cut(info.Description, "\n")
		info.Description = strings.ReplaceAll(body, "\n.\n", "\n\n")
	}
	// Paths in nfpm.yaml are relative to the repository root, whatever the
	// working directory of the caller.
	for _, c := range info.Contents {
		if c.Source != "" && !filepath.IsAbs(c.Source) {
			c.Source = filepath.Join(o.Root, c.Source)
		}
		if strings.Contains(c.Source, "${") || strings.Contains(c.Destination, "${") {
			return Artifact{}, fmt.Errorf("packaging/nfpm.yaml: unexpanded variable in %s -> %s", c.Source, c.Destination)
		}
	}
	for _, s := range []*string{
		&info.Scripts.PreInstall, &info.Scripts.PostInstall, &info.Scripts.PreRemove, &info.Scripts.PostRemove,
		&info.RPM.Scripts.PreTrans, &info.RPM.Scripts.PostTrans,
	} {
		if *s != "" && !filepath.IsAbs(*s) {
			*s = filepath.Join(o.Root, *s)
		}
	}

	pkgr, err := nfpm.Get(format)
	if err != nil {
		return Artifact{}, err
	}
	path := filepath.Join(o.OutDir, pkgr.ConventionalFileName(info))
	var buf bytes.Buffer
	if err := pkgr.Package(info, &buf); err != nil {
		return Artifact{}, err
	}
	// Written whole or not at all: a failed build leaves no truncated package.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return Artifact{}, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return Artifact{}, err
	}
	sum := sha256.Sum256(buf.Bytes())
	return Artifact{Path: path, Format: format, Arch: arch, Version: o.Version,
		Size: int64(buf.Len()), SHA256: hex.EncodeToString(sum[:])}, nil
}

// SHA256File hashes a file (for callers comparing builds).
func SHA256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
