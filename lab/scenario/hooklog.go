package scenario

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// HookEvent is one line of the hook log that `kha-lab hooklog` appends when
// kha-supervisor runs it as a hook (scenario 21).
type HookEvent struct {
	Event   string    // on_promote, on_demote or on_fence (the hook's own argument)
	Node    string    // KHA_NODE
	Cluster string    // KHA_CLUSTER
	Role    string    // KHA_ROLE
	Token   int64     // KHA_FENCING_TOKEN
	At      time.Time // wall clock when the hook ran (same clock as the witnesses)
}

// FormatHookLine renders e as one line: EVENT NODE CLUSTER ROLE TOKEN UNIX-NS.
// Empty fields are written as "-" so the line always has six fields.
func FormatHookLine(e HookEvent) string {
	f := func(s string) string {
		if s == "" || strings.ContainsAny(s, " \t\n") {
			return "-"
		}
		return s
	}
	return fmt.Sprintf("%s %s %s %s %d %d\n", f(e.Event), f(e.Node), f(e.Cluster), f(e.Role), e.Token, e.At.UnixNano())
}

// AppendHookLine appends e to the log at path in one write(2) on an O_APPEND
// file, so that two nodes' hooks never interleave within a line.
func AppendHookLine(path string, e HookEvent) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("hook log: %w", err)
	}
	_, werr := f.WriteString(FormatHookLine(e))
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("hook log %s: %w", path, err)
	}
	return nil
}

// HookEventFromEnv builds the event the hook was run for from its
// environment (KHA_NODE, KHA_CLUSTER, KHA_ROLE, KHA_FENCING_TOKEN).
func HookEventFromEnv(event string, getenv func(string) string, now time.Time) (HookEvent, error) {
	e := HookEvent{Event: event, Node: getenv("KHA_NODE"), Cluster: getenv("KHA_CLUSTER"), Role: getenv("KHA_ROLE"), At: now}
	if t := getenv("KHA_FENCING_TOKEN"); t != "" {
		tok, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return e, fmt.Errorf("hook log: KHA_FENCING_TOKEN %q: %w", t, err)
		}
		e.Token = tok
	}
	return e, nil
}

// ReadHookLog parses a hook log; a malformed line is an error (the lab wrote
// every line itself).
func ReadHookLog(r io.Reader) ([]HookEvent, error) {
	var out []HookEvent
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 6 {
			return out, fmt.Errorf("hook log line %d: want 6 fields, got %d: %q", n, len(f), line)
		}
		tok, err1 := strconv.ParseInt(f[4], 10, 64)
		ns, err2 := strconv.ParseInt(f[5], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return out, fmt.Errorf("hook log line %d: %w", n, err)
		}
		for i := range 4 {
			if f[i] == "-" {
				f[i] = ""
			}
		}
		out = append(out, HookEvent{Event: f[0], Node: f[1], Cluster: f[2], Role: f[3], Token: tok, At: time.Unix(0, ns)})
	}
	return out, sc.Err()
}
