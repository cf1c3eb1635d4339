package lab

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// EtcdTiming is the raft timing the lab's etcd members run with.
type EtcdTiming struct {
	Name        string
	HeartbeatMS uint
	ElectionMS  uint
}

// StockEtcd is etcd's own default timing (100 ms heartbeat, 1 s election
// timeout), what an operator's etcd runs unless someone tuned it: the lab's
// default, so that the matrix measures what production sees (issue 11.2).
var StockEtcd = EtcdTiming{Name: "stock", HeartbeatMS: 100, ElectionMS: 1000}

// TunedEtcd is etcd's advice for a low-latency LAN (heartbeat about one
// round trip, election timeout 10x): a lost etcd leader is replaced about
// twice as fast. Only on request (`--etcd tuned`).
var TunedEtcd = EtcdTiming{Name: "tuned", HeartbeatMS: 50, ElectionMS: 500}

// EtcdTimingByName resolves a --etcd value.
func EtcdTimingByName(name string) (EtcdTiming, error) {
	switch name {
	case StockEtcd.Name:
		return StockEtcd, nil
	case TunedEtcd.Name:
		return TunedEtcd, nil
	}
	return EtcdTiming{}, fmt.Errorf("lab: unknown etcd timing %q (stock or tuned)", name)
}

func (t EtcdTiming) String() string {
	return fmt.Sprintf("%s (heartbeat %d ms, election timeout %d ms)", t.Name, t.HeartbeatMS, t.ElectionMS)
}

// etcdTimingFile remembers the timing the lab was brought up with, so that
// a member a scenario restarts runs with the same timing as the others
// whatever later commands are given.
func (l *Lab) etcdTimingFile() string { return l.path("run", "etcd-timing") }

// resolveEtcdTiming picks the timing: the explicit choice, else the one the
// running lab was brought up with, else stock.
func (l *Lab) resolveEtcdTiming(explicit string) (EtcdTiming, error) {
	name, err := savedChoice(l.etcdTimingFile(), explicit, "etcd timing", "--etcd")
	switch {
	case err != nil:
		return EtcdTiming{}, err
	case name == "":
		return StockEtcd, nil
	}
	return EtcdTimingByName(name)
}

// savedChoice is what a later command runs of a choice up saved in file:
// the explicit one (refused when it differs from the saved one: the lab
// must be brought down first), else the saved one, else "" (none saved).
func savedChoice(file, explicit, what, flag string) (string, error) {
	b, err := os.ReadFile(file)
	saved := strings.TrimSpace(string(b))
	switch {
	case err == nil && explicit != "" && saved != explicit:
		return "", fmt.Errorf("lab: it runs %s %q; %s %s needs `kha-lab down` first", what, saved, flag, explicit)
	case explicit != "":
		return explicit, nil
	case err == nil:
		return saved, nil
	case errors.Is(err, os.ErrNotExist):
		return "", nil
	default:
		return "", fmt.Errorf("lab: %w", err)
	}
}

func (l *Lab) saveEtcdTiming() error {
	if err := os.WriteFile(l.etcdTimingFile(), []byte(l.EtcdTiming.Name+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}
