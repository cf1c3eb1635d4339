package commits

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
)

// Case is one judged trial as it can be judged again: what etcd committed,
// the apiservers' audit lines (ResponseComplete), by master, and the
// attribution the trial used. The unit tests judge stored cases; a real-
// plane trial keeps its case when asked (plane: KHA_KEEP_COMMITS).
type Case struct {
	Recording Recording           `json:"recording"`
	Audit     map[string][]string `json:"audit"`
	// Masters and Hosts are Options.Masters and Options.Hosts (none: a
	// write is the master's whose audit log it is in).
	Masters map[string]string `json:"masters,omitempty"`
	Hosts   map[string]string `json:"hosts,omitempty"`
}

// Events parses the audit lines, in completion order.
func (c Case) Events() ([]audit.Event, error) {
	var evs []audit.Event
	for _, m := range slices.Sorted(maps.Keys(c.Audit)) {
		e, err := audit.Parse(strings.NewReader(strings.Join(c.Audit[m], "\n")+"\n"), m)
		if err != nil {
			return nil, err
		}
		evs = append(evs, e...)
	}
	slices.SortStableFunc(evs, func(a, b audit.Event) int { return a.Completed.Compare(b.Completed) })
	return evs, nil
}

// Options are the case's attribution.
func (c Case) Options() Options { return Options{Masters: c.Masters, Hosts: c.Hosts} }

// Save writes the case gzipped as JSON.
func (c Case) Save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	enc.SetIndent("", " ")
	err = enc.Encode(c)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("commits: save %s: %w", path, err)
	}
	return nil
}

// LoadCase reads a case Save wrote.
func LoadCase(path string) (Case, error) {
	var c Case
	f, err := os.Open(path)
	if err != nil {
		return c, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return c, fmt.Errorf("commits: %s: %w", path, err)
	}
	if err := json.NewDecoder(zr).Decode(&c); err != nil {
		return c, fmt.Errorf("commits: %s: %w", path, err)
	}
	return c, nil
}

// AuditLines are the ResponseComplete lines of the writes in an audit log
// completed in [from, to].
func AuditLines(path string, from, to time.Time) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		var ev struct {
			Stage string    `json:"stage"`
			Verb  string    `json:"verb"`
			At    time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s, line %d: %w", path, n, err)
		}
		if ev.Stage != "ResponseComplete" || ev.At.Before(from) || ev.At.After(to) || !(audit.Event{Verb: ev.Verb}).Write() {
			continue
		}
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}
