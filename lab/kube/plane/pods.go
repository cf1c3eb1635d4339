package plane

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// Helpers for scenarios that watch workloads (scenario 50).

// Any runs fn with the first admin client (apiserver) that answers.
func (r *Runner) Any(ctx context.Context, fn func(context.Context, kubernetes.Interface) error) error {
	var errs []error
	for _, c := range r.Clients {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := fn(cctx, c)
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// AnyFrom is Any with master m's apiserver tried first (a scenario that
// cut the other one off: its requests would wait out their timeout first).
func (r *Runner) AnyFrom(ctx context.Context, m string, fn func(context.Context, kubernetes.Interface) error) error {
	cs := slices.Clone(r.Clients)
	if i := slices.Index(lab.MasterNames, m); i > 0 && i < len(cs) {
		cs[0], cs[i] = cs[i], cs[0]
	}
	return (&Runner{Clients: cs}).Any(ctx, fn)
}

// UnitStart is unit's last start on master m.
func (r *Runner) UnitStart(ctx context.Context, m, unit string) (time.Time, error) {
	return r.unitStart(ctx, m, unit)
}

// JournalLine is one message of a unit's journal on a master.
type JournalLine struct {
	At      time.Time
	Message string
}

// Journal is unit's journal on master m since the given time (journald's
// own receive timestamps, microseconds).
func (r *Runner) Journal(ctx context.Context, m, unit string, since time.Time) ([]JournalLine, error) {
	n, err := r.P.Lab.Master(m)
	if err != nil {
		return nil, err
	}
	out, err := n.Exec(ctx, "journalctl", "--no-pager", "-o", "json", "-u", unit,
		"--since", since.Add(-time.Second).Local().Format("2006-01-02 15:04:05"))
	if err != nil {
		return nil, err
	}
	var lines []JournalLine
	for _, l := range strings.Split(string(out), "\n") {
		var e struct {
			Realtime string          `json:"__REALTIME_TIMESTAMP"`
			Message  json.RawMessage `json:"MESSAGE"`
		}
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		us, err := strconv.ParseInt(e.Realtime, 10, 64)
		var msg string
		if err != nil || json.Unmarshal(e.Message, &msg) != nil {
			continue // a binary message is none of the supervisor's
		}
		if at := time.UnixMicro(us); !at.Before(since) {
			lines = append(lines, JournalLine{At: at, Message: msg})
		}
	}
	return lines, nil
}
