package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/nspawn"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// HoldOptions describe the containers a holder boots.
type HoldOptions struct {
	Prefix    string            // machine name = Prefix-NAME
	NetNS     map[string]string // master name -> network namespace path (the lab's)
	Shared    string            // host directory bound at /lab
	StateFile string            // where the booted containers are recorded
	LogDir    string            // console log per container
	Log       *slog.Logger
	Binds     []nspawn.Bind // extra bind mounts (the real plane's binaries and certificates)
}

// MachineName is the nspawn machine name of master.
func MachineName(prefix, master string) string { return prefix + "-" + master }

// entry is one container in the state file. The leader's start time guards
// against a recycled PID: Load refuses an entry whose process is not the one
// that was booted.
type entry struct {
	Name        string `json:"name"`
	Machine     string `json:"machine"`
	Leader      int    `json:"leader"`
	LeaderStart uint64 `json:"leader_start"`
	NspawnPID   int    `json:"nspawn_pid"`
}

// Hold boots every master, records them in StateFile, and keeps them until
// ctx ends; then it powers them off and removes the file. It is the body of
// the lab's holder process.
func Hold(ctx context.Context, o HoldOptions) error {
	lg := o.Log
	if lg == nil {
		lg = slog.Default()
	}
	_ = os.Remove(o.StateFile)
	containers, err := bootAll(ctx, o, lg)
	shutdown := func() error { return shutdownAll(containers, o.StateFile) }
	if err != nil {
		return errors.Join(err, shutdown())
	}
	var st []entry
	for name, c := range containers {
		id, err := proc.Identify(c.Leader())
		if err != nil {
			return errors.Join(err, shutdown())
		}
		st = append(st, entry{Name: name, Machine: c.Name(), Leader: c.Leader(), LeaderStart: id.Start, NspawnPID: c.PID()})
	}
	if err := writeState(o.StateFile, st); err != nil {
		return errors.Join(err, shutdown())
	}
	lg.Info("masters booted and held", "state", o.StateFile)
	exited := make(chan string, len(containers))
	for name, c := range containers {
		go func() {
			<-c.Exited()
			exited <- name
		}()
	}
	select {
	case <-ctx.Done():
		lg.Info("powering masters off")
		return shutdown()
	case name := <-exited:
		// A master that powers off on its own leaves the lab broken: say so
		// and release the other, so `up` can start over.
		lg.Error("master container exited on its own", "master", name)
		return errors.Join(fmt.Errorf("master %s exited", name), shutdown())
	}
}

// bootAll boots every master of o at once; it returns those that booted and
// the errors of those that did not.
func bootAll(ctx context.Context, o HoldOptions, lg *slog.Logger) (map[string]*nspawn.Container, error) {
	var (
		mu         sync.Mutex
		containers = map[string]*nspawn.Container{}
		errs       []error
		wg         sync.WaitGroup
	)
	for name, netns := range o.NetNS {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logf, err := os.OpenFile(filepath.Join(o.LogDir, "console-"+name+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			c, err := nspawn.Boot(ctx, nspawn.Options{
				Name:   MachineName(o.Prefix, name),
				NetNS:  netns,
				Lab:    o.Shared,
				Log:    logf,
				Logger: lg,
				Binds:  o.Binds,
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("boot %s: %w", name, err))
				logf.Close()
				return
			}
			containers[name] = c
		}()
	}
	wg.Wait()
	return containers, errors.Join(errs...)
}

// shutdownAll powers every container off at once and removes the state file.
func shutdownAll(containers map[string]*nspawn.Container, stateFile string) error {
	var serrs []error
	var swg sync.WaitGroup
	var smu sync.Mutex
	for name, c := range containers {
		swg.Add(1)
		go func() {
			defer swg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := c.Shutdown(sctx); err != nil {
				smu.Lock()
				serrs = append(serrs, fmt.Errorf("shut down %s: %w", name, err))
				smu.Unlock()
			}
		}()
	}
	swg.Wait()
	_ = os.Remove(stateFile)
	return errors.Join(serrs...)
}

func writeState(path string, st []entry) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("master: %w", err)
	}
	return nil
}

// Load attaches to the masters recorded in stateFile. It fails when the file
// is missing or any recorded container is no longer the one booted.
func Load(stateFile string) (map[string]*Node, error) {
	b, err := os.ReadFile(stateFile)
	if err != nil {
		return nil, fmt.Errorf("master: masters not up: %w", err)
	}
	var st []entry
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("master: %s: %w", stateFile, err)
	}
	out := map[string]*Node{}
	for _, e := range st {
		if !proc.Alive(proc.ID{PID: e.Leader, Start: e.LeaderStart}) {
			return nil, fmt.Errorf("master: %s (leader PID %d) is gone", e.Name, e.Leader)
		}
		out[e.Name] = &Node{Name: e.Name, Leader: e.Leader}
	}
	return out, nil
}
