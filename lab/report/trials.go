package report

import (
	"encoding/json"
	"fmt"
	"os"
)

// SaveTrials writes a real-plane run, its trials in order, as JSON to
// path (kha-lab run --plane real, the real plane's soak).
func SaveTrials(path string, rs []Result) error {
	b, err := json.MarshalIndent(rs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// LoadTrials reads real-plane runs written by SaveTrials, and those saved
// before the one Result; a file that is not one is named in the error.
func LoadTrials(paths ...string) ([]Result, error) {
	var all []Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var rs []Result
		if err := json.Unmarshal(b, &rs); err != nil {
			return nil, fmt.Errorf("%s: not a saved sidebyside run: %w", p, err)
		}
		all = append(all, rs...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%v: no trials", paths)
	}
	return all, nil
}
