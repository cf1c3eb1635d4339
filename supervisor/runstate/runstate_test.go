package runstate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "run")}
	if _, ok, err := s.Load(); ok || err != nil {
		t.Fatalf("empty dir: ok %v err %v, want none", ok, err)
	}
	want := State{Node: "m1", Cluster: "c", Incarnation: "abc", MemberLease: 7, ElectionLease: 9, Token: 42,
		SavedAt: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
		Fenced:  &Fenced{At: time.Date(2026, 12, 1, 12, 0, 1, 0, time.UTC), Kind: "deadline", Reason: "r", Token: 42}}
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Load()
	if err != nil || !ok || got.Node != want.Node || got.ElectionLease != 9 || got.Fenced == nil || !got.Fenced.At.Equal(want.Fenced.At) {
		t.Fatalf("load: %+v ok %v err %v", got, ok, err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %v (err %v), want 0600", fi.Mode(), err)
	}
	di, err := os.Stat(s.Dir)
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("state dir mode %v (err %v), want 0700", di.Mode(), err)
	}
	// A second save replaces the file and leaves no temporary behind.
	want.ElectionLease = 0
	if err := s.Save(want); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(s.Dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries after two saves, want the state file only", len(ents))
	}
	if got, _, _ := s.Load(); got.ElectionLease != 0 {
		t.Fatalf("second save not read back: %+v", got)
	}
}

func TestLoadNamesAMalformedFile(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := os.WriteFile(s.Path(), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, ok, err := s.Load()
	if ok || err == nil || !strings.Contains(err.Error(), s.Path()) {
		t.Fatalf("malformed file: ok %v err %v, want an error naming %s", ok, err, s.Path())
	}
}
