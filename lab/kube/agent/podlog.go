package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Record events of the pod log.
const (
	EventStart = "start" // the agent began running the pod
	EventStop  = "stop"  // the agent stopped it
	EventLost  = "lost"  // no apiserver answered: the pods are kept running
	EventFound = "found" // an apiserver answered again
)

// Record is one line of an agent's pod log (JSON lines): what the node
// ran when, as the node itself saw it, whatever the apiservers said.
type Record struct {
	At        time.Time `json:"at"`
	Node      string    `json:"node"`
	Event     string    `json:"event"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	UID       types.UID `json:"uid,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Pods      int       `json:"pods,omitempty"` // lost: how many it keeps running
}

// PodLog appends records to a file (nil or empty path: nowhere).
type PodLog struct {
	Path string
	mu   sync.Mutex
}

// Write appends r; a failure is returned, the agent logs it and goes on.
func (l *PodLog) Write(r Record) error {
	if l == nil || l.Path == "" {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("agent: pod log: %w", err)
	}
	b, _ := json.Marshal(r)
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadPodLog reads a pod log (a missing file is an empty log).
func ReadPodLog(path string) ([]Record, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agent: pod log: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("agent: pod log %s line %d: %w", path, n, err)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// Interval is one pod run on one node: From its start to To (zero: still
// running at the end of the log).
type Interval struct {
	Node            string
	Namespace, Name string
	UID             types.UID
	From, To        time.Time
	StopReason      string
}

// Intervals pairs the start and stop records, by pod UID and node.
func Intervals(recs []Record) []Interval {
	var out []Interval
	open := map[string]int{}
	for _, r := range recs {
		k := r.Node + "/" + string(r.UID)
		switch r.Event {
		case EventStart:
			open[k] = len(out)
			out = append(out, Interval{Node: r.Node, Namespace: r.Namespace, Name: r.Name, UID: r.UID, From: r.At})
		case EventStop:
			if i, ok := open[k]; ok {
				out[i].To, out[i].StopReason = r.At, r.Reason
				delete(open, k)
			}
		}
	}
	return out
}

// Both is the span in which a and b ran at once (ok false: never; a zero
// end is "still running", taken as end).
func Both(a, b Interval, end time.Time) (from, to time.Time, ok bool) {
	ea, eb := a.To, b.To
	if ea.IsZero() {
		ea = end
	}
	if eb.IsZero() {
		eb = end
	}
	from, to = a.From, ea
	if b.From.After(from) {
		from = b.From
	}
	if eb.Before(to) {
		to = eb
	}
	return from, to, from.Before(to)
}
