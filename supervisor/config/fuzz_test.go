package config

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad writes arbitrary bytes as a configuration file. Load must never
// panic; every refusal must be a *Error naming the file, on one line; and
// every accepted file must Describe to TOML that loads back to the same
// configuration.
//
//	go test -run='^$' -fuzz=FuzzLoad -fuzztime=120s ./supervisor/config/
func FuzzLoad(f *testing.F) {
	if example, err := os.ReadFile(examplePath); err == nil {
		f.Add(example)
	} else {
		f.Fatal(err)
	}
	f.Add([]byte(""))
	seedDir := f.TempDir()
	p := newPKI(f, seedDir)
	for _, r := range refusals() {
		f.Add([]byte(r.toml(f, seedDir, p)))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		tmp, err := os.CreateTemp(dir, "c*.toml")
		if err != nil {
			t.Fatal(err)
		}
		path := tmp.Name()
		defer os.Remove(path)
		if _, err := tmp.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := tmp.Close(); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is %T, not *config.Error: %v", err, err)
			}
			if e.File == "" || e.File != path {
				t.Fatalf("File = %q, want %q: %v", e.File, path, err)
			}
			if msg := err.Error(); strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("refusal is not one line: %q", msg)
			}
			return
		}
		var out bytes.Buffer
		if err := cfg.Describe(&out); err != nil {
			t.Fatal(err)
		}
		again := path + ".described"
		if err := os.WriteFile(again, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(again)
		got, err := Load(again)
		if err != nil {
			t.Fatalf("Describe output of an accepted file is refused: %v\ninput:\n%s\nDescribe:\n%s", err, data, out.Bytes())
		}
		got.Path = cfg.Path
		// Describe writes every key, so none comes from the profile on the
		// way back; the values are what must survive.
		got.FromProfile = cfg.FromProfile
		if !reflect.DeepEqual(got, cfg) {
			t.Fatalf("Describe round trip changed %s\ninput:\n%s", diff(got, cfg), data)
		}
	})
}
