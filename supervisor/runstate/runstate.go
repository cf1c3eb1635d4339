// Package runstate keeps what a restarted kha-supervisor needs to recognise
// its previous incarnation: the leases and token it held. The file lives on
// /run (tmpfs: gone at reboot, when nothing of the old incarnation can be
// alive either), is root-only, and is replaced atomically so a crash midway
// leaves the old contents or the new, never a torn file.
package runstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// DefaultDir is where the packaged daemon keeps its run state: the unit's
// RuntimeDirectory= (kept across restarts by RuntimeDirectoryPreserve=).
const DefaultDir = layout.RunDir

// FileName is the state file's name inside the directory.
const FileName = "incarnation.json"

// State is one incarnation as it last saved itself.
type State struct {
	Node        string `json:"node"`
	Cluster     string `json:"cluster"`
	Incarnation string `json:"incarnation"`
	// MemberLease carries the member record; ElectionLease and Token are
	// set while this incarnation holds (or may still hold) the election
	// key, and cleared only once it gave both back.
	MemberLease   int64     `json:"member_lease,omitempty"`
	ElectionLease int64     `json:"election_lease,omitempty"`
	Token         int64     `json:"token,omitempty"`
	SavedAt       time.Time `json:"saved_at"`
	// Fenced is left by a process that fenced, for its successor to
	// publish (the fencing process may not reach etcd).
	Fenced *Fenced `json:"fenced,omitempty"`
	// Holder is the last other holder of the election key this
	// incarnation saw, for a successor's promotion barrier.
	Holder *Holder `json:"holder,omitempty"`
}

// Holder is another member's hold of the election key, and the store
// revision of the read that showed it: a successor replays the key's
// history from there rather than trust it blindly.
type Holder struct {
	Node     string `json:"node"`
	Lease    int64  `json:"lease"`
	Token    int64  `json:"token"`
	Revision int64  `json:"revision"`
	// ClusterID is the etcd cluster the revision is of.
	ClusterID uint64 `json:"cluster_id"`
}

// Fenced describes a fence, as the fencing process saw it.
type Fenced struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Reason string    `json:"reason"`
	Token  int64     `json:"token,omitempty"`
	// KeepLease: the fence was a drill that rehearses the full lease
	// wait; the successor must not give the election lease back early.
	KeepLease bool `json:"keep_lease,omitempty"`
}

// Store reads and writes the state file in Dir.
type Store struct{ Dir string }

// Path is the state file's path.
func (s Store) Path() string { return filepath.Join(s.Dir, FileName) }

// Load returns the saved state; ok is false when there is none. A file that
// cannot be read or decoded is an error naming it.
func (s Store) Load() (st State, ok bool, err error) {
	b, err := os.ReadFile(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false, nil
	}
	if err != nil {
		return State{}, false, fmt.Errorf("run state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{}, false, fmt.Errorf("run state %s: %w", s.Path(), err)
	}
	return st, true, nil
}

// Save replaces the state file atomically (temporary file, fsync, rename,
// fsync of the directory), mode 0600. The directory is created 0700 when
// missing; an existing one keeps its mode.
func (s Store) Save(st State) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("run state: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("run state: %w", err)
	}
	tmp, err := os.CreateTemp(s.Dir, "."+FileName+".*")
	if err != nil {
		return fmt.Errorf("run state: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := writeSync(tmp, append(b, '\n')); err != nil {
		return fmt.Errorf("run state %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), s.Path()); err != nil {
		return fmt.Errorf("run state: %w", err)
	}
	if d, err := os.Open(s.Dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func writeSync(f *os.File, b []byte) error {
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
