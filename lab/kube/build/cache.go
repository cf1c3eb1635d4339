package build

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// DefaultCacheDir holds one directory per release, outside any source tree.
const DefaultCacheDir = "/var/cache/kha-lab/k8s"

// stampName is written last into a release directory: a directory without
// a valid stamp is an interrupted build, never used.
const stampName = "stamp.json"

// Stamp records what a release directory holds.
type Stamp struct {
	Version   string            `json:"version"`    // k8s.io/kubernetes release
	GoVersion string            `json:"go_version"` // `go env GOVERSION` of the toolchain that built it
	Built     time.Time         `json:"built"`
	BuildTime string            `json:"build_time"` // wall time of the whole build, for the notes
	SHA256    map[string]string `json:"sha256"`     // binary name -> hex digest
}

// Binaries locates one release's programs in a cache directory.
type Binaries struct {
	Dir     string
	Version string
}

// ReleaseDir is where a release is installed.
func ReleaseDir(cacheDir, release string) string {
	return filepath.Join(cacheDir, release)
}

// Path is the binary of one command (kube-apiserver, ...).
func (b Binaries) Path(command string) string {
	return filepath.Join(b.Dir, command)
}

// decision says whether a release directory can be used as it is.
type decision struct {
	Use    bool
	Reason string // why not, for the progress line
	Stamp  Stamp
}

// decide checks dir against its stamp: the stamp must name the release and
// every command's binary must hash to what the stamp recorded. The Go
// version is recorded but does not invalidate a build: the binaries are the
// same release whichever toolchain compiled them, and a rebuild costs ~15
// minutes. Any doubt (no stamp, unreadable stamp, missing or changed binary)
// means rebuild, never use.
func decide(dir, release string) (decision, error) {
	data, err := os.ReadFile(filepath.Join(dir, stampName))
	if errors.Is(err, fs.ErrNotExist) {
		return decision{Reason: "not built yet"}, nil
	}
	if err != nil {
		return decision{}, fmt.Errorf("read stamp: %w", err)
	}
	var s Stamp
	if err := json.Unmarshal(data, &s); err != nil {
		return decision{Reason: fmt.Sprintf("stamp %s unreadable (%v)", filepath.Join(dir, stampName), err)}, nil
	}
	if s.Version != release {
		return decision{Reason: fmt.Sprintf("stamp is for %q, not %s", s.Version, release)}, nil
	}
	for _, c := range Commands {
		want, ok := s.SHA256[c]
		if !ok {
			return decision{Reason: "stamp has no digest for " + c}, nil
		}
		got, err := fileSHA256(filepath.Join(dir, c))
		if errors.Is(err, fs.ErrNotExist) {
			return decision{Reason: c + " is missing"}, nil
		}
		if err != nil {
			return decision{}, fmt.Errorf("hash %s: %w", c, err)
		}
		if got != want {
			return decision{Reason: c + " does not match its stamp's sha256"}, nil
		}
	}
	return decision{Use: true, Stamp: s}, nil
}

func fileSHA256(path string) (string, error) {
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

// writeStamp writes the stamp atomically (temporary file, then rename).
func writeStamp(dir string, s Stamp) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stampName+".tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stampName))
}
